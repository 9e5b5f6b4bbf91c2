package wire

import (
	"bytes"
	"strconv"

	"github.com/goccy/go-json"
)

// The Responses API (/v1/responses) on the prefill/decode path.
//
// Both legs go to the engine's /v1/responses. The prefill leg is the client body with
// max_output_tokens 1, stream false, store false, no stream_options and the connector's
// kv_transfer_params (vLLM's ResponsesRequest carries them into its sampling parameters); the
// decode leg is the client body streaming, store false, with the descriptor. Server-side state
// cannot work across two engines and a router that stores nothing, so previous_response_id,
// conversation, background and store: true are refused with a 400 naming the field.
//
// The stream is typed events ("event: <type>" then "data: {...,"type":"<type>"}"). Its first
// generated output — what commits the attempt and what first_byte_s measures — is the first
// event that carries generated output: a non-empty delta (output_text, reasoning_text,
// reasoning_summary_text, refusal, function_call_arguments, ...) or a finished output item
// (response.output_item.done: the model answered, possibly with nothing). response.created,
// response.in_progress and the added/part events before it are held, like chat's role delta.
// response.completed and response.incomplete end the stream (there is no [DONE]);
// response.failed and error are errors.

// checkResponses validates what a /v1/responses body needs before any engine work.
func (b *ClientBody) checkResponses() *BadRequestError {
	v, ok := b.member("input")
	if !ok || IsNull(v) {
		return badRequest("input", "the input field is required")
	}
	if c := v[0]; c != '"' && c != '[' {
		return badRequest("input", "input must be a string or an array of input items")
	}
	if v, ok := b.member("instructions"); ok && !IsNull(v) && v[0] != '"' {
		return badRequest("instructions", "instructions must be a string")
	}
	for _, key := range [...]string{"previous_response_id", "conversation"} {
		if v, ok := b.member(key); ok && !IsNull(v) {
			return badRequest(key, "%s is not supported: Narwhal runs a response's prefill and decode on two engines "+
				"and keeps no responses; send the whole conversation in input", key)
		}
	}
	if v, ok := b.member("background"); ok && bytes.Equal(v, jsonTrue) {
		return badRequest("background", "background responses are not supported (they need a stored response)")
	}
	if v, ok := b.member("store"); ok && bytes.Equal(v, jsonTrue) {
		return badRequest("store", "store: true is not supported: no engine keeps a response Narwhal could "+
			"retrieve later; omit store or set it to false")
	}
	return nil
}

// classifyResponses says what a Responses stream event of the given type (decoded) carries;
// delta is the event's "delta" member as sent.
func classifyResponses(typ, delta []byte) EventKind {
	switch string(typ) {
	case "response.completed", "response.incomplete":
		return EventDone
	case "response.failed", "error":
		return EventError
	case "response.output_item.done":
		return EventToken
	}
	if len(typ) > 6 && string(typ[len(typ)-6:]) == ".delta" && len(delta) > 0 && !IsNull(delta) && string(delta) != `""` {
		return EventToken
	}
	return EventMeta
}

// parseResponsesError reads a Responses error event ({"type":"error","code","message"}) or a
// response.failed event (the error in response.error); ok is false for anything else.
func parseResponsesError(data []byte) (StreamError, bool) {
	var ev struct {
		Type     string          `json:"type"`
		Code     json.RawMessage `json:"code"`
		Message  string          `json:"message"`
		Response struct {
			Error struct {
				Code    json.RawMessage `json:"code"`
				Message string          `json:"message"`
			} `json:"error"`
		} `json:"response"`
	}
	if json.Unmarshal(data, &ev) != nil {
		return StreamError{}, false
	}
	code, msg := ev.Code, ev.Message
	switch ev.Type {
	case "error":
	case "response.failed":
		code, msg = ev.Response.Error.Code, ev.Response.Error.Message
	default:
		return StreamError{}, false
	}
	if msg == "" {
		msg = "engine reported an error inside the stream"
	}
	se := StreamError{Status: 500, Message: msg, Type: "server_error"}
	// The code is an HTTP status, as a number or as a string ("500"); anything else is a 500.
	var n int
	var s string
	if json.Unmarshal(code, &s) == nil {
		code = []byte(strconv.Quote(s))
		n, _ = strconv.Atoi(s)
	} else {
		_ = json.Unmarshal(code, &n)
	}
	if n >= 400 && n <= 599 {
		se.Status = n
	}
	if len(code) == 0 {
		code = jsonNull
	}
	obj := struct {
		Message string          `json:"message"`
		Type    string          `json:"type"`
		Param   json.RawMessage `json:"param"`
		Code    json.RawMessage `json:"code"`
	}{msg, se.Type, jsonNull, code}
	se.Body, _ = json.Marshal(obj)
	return se, true
}

// AppendResponsesErrorEvent appends the terminal event of a Responses stream that failed after
// commit: an "error" event in the Responses shape, numbered after the events relayed before it.
func AppendResponsesErrorEvent(dst []byte, code, message string, seq int) []byte {
	dst = append(dst, "event: error\ndata: "...)
	obj := struct {
		Type           string  `json:"type"`
		Code           string  `json:"code"`
		Message        string  `json:"message"`
		Param          *string `json:"param"`
		SequenceNumber int     `json:"sequence_number"`
	}{"error", code, message, nil, seq}
	b, _ := json.Marshal(obj)
	dst = append(dst, b...)
	return append(dst, "\n\n"...)
}

// addResponses keeps the final response object of a Responses stream (response.completed or
// response.incomplete carry it whole) and its usage.
func (a *Assembler) addResponses(data []byte) {
	var ev struct {
		Type     string          `json:"type"`
		Response json.RawMessage `json:"response"`
	}
	if json.Unmarshal(data, &ev) != nil {
		return
	}
	if ev.Type != "response.completed" && ev.Type != "response.incomplete" {
		return
	}
	a.response = append(a.response[:0], ev.Response...)
	var r struct {
		Usage json.RawMessage `json:"usage"`
	}
	if json.Unmarshal(ev.Response, &r) == nil && len(r.Usage) > 0 && !IsNull(r.Usage) {
		a.usage = append(a.usage[:0], r.Usage...)
	}
}

// errNoResponse is the assembly error of a Responses stream that never carried its response.
type errNoResponse struct{}

func (errNoResponse) Error() string { return "the stream ended without a final response object" }
