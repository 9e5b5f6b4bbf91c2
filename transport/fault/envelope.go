package fault

import (
	"strconv"

	"github.com/goccy/go-json"

	"github.com/narwhal-router/narwhal/transport/wire"
)

// ErrorBody is the OpenAI error envelope's inner object.
type ErrorBody struct {
	Message string  `json:"message"`
	Type    string  `json:"type"`
	Param   *string `json:"param"`
	Code    any     `json:"code"`
}

// AppendErrorEnvelope appends {"error":{...}} for a router-made error.
func AppendErrorEnvelope(dst []byte, e ErrorBody) []byte {
	inner, err := json.Marshal(e)
	if err != nil { // unreachable: ErrorBody holds only strings
		inner = []byte(`{"message":"internal error","type":"internal_error","param":null,"code":null}`)
	}
	return AppendEnvelope(dst, inner)
}

// AppendEnvelope wraps an error object as {"error":obj}.
func AppendEnvelope(dst, obj []byte) []byte {
	dst = append(dst, `{"error":`...)
	dst = append(dst, obj...)
	return append(dst, '}')
}

// ErrorType names the envelope's type for each status the router itself produces.
func ErrorType(status int) string {
	switch status {
	case 400, 404, 413:
		return "invalid_request_error"
	case 401:
		return "authentication_error"
	case 502:
		return "bad_gateway"
	case 503:
		return "service_unavailable"
	case 504:
		return "gateway_timeout"
	}
	return "server_error"
}

// ClientBody is the error body a client gets when f ends its request before commit (with status
// f.ClientStatus()), made as the kind's Body column says. exposeEngine is the operator's
// server.expose_engine_errors: whether an in-stream engine error's own body (EngineRedacted)
// reaches clients.
func ClientBody(f *Fault, exposeEngine bool) []byte {
	switch f.Kind.row().Body {
	case EngineRedacted:
		if !exposeEngine {
			return appendRedactedEnvelope(nil, f)
		}
		fallthrough
	case EngineBody:
		if len(f.Body) > 0 && json.Valid(f.Body) {
			if wire.IsErrorData(f.Body) {
				return f.Body
			}
			return AppendEnvelope(nil, f.Body) // vLLM before 0.10.1 sent the error object bare
		}
	}
	return appendRouterEnvelope(nil, f)
}

// AppendTerminalEvent appends the one event that ends a stream f failed after commit, when the
// client already has a 200 and events: for the Responses API (ep) an "error" event numbered seq
// (after the seq events relayed before it), else the {"error": ...} data event of the completions
// APIs. engineEvent is the engine's own error event as it sent it, when the failure is one (nil
// otherwise).
//
// The Body column decides it as it decides ClientBody: an EngineRedacted fault relays
// engineEvent as it is when exposeEngine is set, and otherwise ends the stream with the redacted
// error (for the Responses API: the engine's scalar code, or its status, and the redacted
// message). Every other fault ends it with the router's error (code: the kind's name, message:
// Detail); an engine's whole answer body (EngineBody) is an answer to a request, never an event
// of a stream, and an engine sends one only instead of a stream.
func AppendTerminalEvent(dst []byte, f *Fault, ep wire.Endpoint, seq int, exposeEngine bool, engineEvent []byte) []byte {
	redact := f.Kind.row().Body == EngineRedacted
	if redact && exposeEngine && len(engineEvent) > 0 {
		return append(dst, engineEvent...)
	}
	if ep == wire.EndpointResponses {
		code, msg := f.Kind.String(), f.Detail
		if redact {
			r := redactedError(f)
			code, msg = r.codeText(), r.message
		}
		return wire.AppendResponsesErrorEvent(dst, code, msg, seq)
	}
	dst = append(dst, "data: "...)
	if redact {
		dst = appendRedactedEnvelope(dst, f)
	} else {
		dst = appendRouterEnvelope(dst, f)
	}
	return append(dst, "\n\n"...)
}

// appendRouterEnvelope appends the router's envelope for f: its code names the fault kind and its
// message is Detail, which never holds an engine URL.
func appendRouterEnvelope(dst []byte, f *Fault) []byte {
	return AppendErrorEnvelope(dst, ErrorBody{Message: f.Detail, Type: ErrorType(f.ClientStatus()), Code: f.Kind.String()})
}

// redacted is what of an in-stream engine error reaches a client that is not shown the engine's
// errors. An engine's message can name internal addresses ("KV pull from 10.20.30.40:5600
// failed"), so it is replaced by one naming the fault kind and the engine's status; the full
// text stays in f.Detail for the access log. The engine's type, param and code stay when they
// are strings or numbers: an object or an array there could carry anything.
type redacted struct {
	message string
	typ     string
	param   json.RawMessage // a JSON string or number, or null
	code    json.RawMessage // a JSON string or number (the engine's status when it sent neither)
}

func redactedError(f *Fault) redacted {
	var env struct {
		Error struct {
			Type  string          `json:"type"`
			Param json.RawMessage `json:"param"`
			Code  json.RawMessage `json:"code"`
		} `json:"error"`
	}
	_ = json.Unmarshal(f.Body, &env) // what did not parse is left out
	e := env.Error
	r := redacted{
		message: "engine reported an error (" + f.Kind.String() + ", status " + strconv.Itoa(f.Status) + ")",
		typ:     e.Type, param: e.Param, code: e.Code,
	}
	if r.typ == "" {
		r.typ = ErrorType(f.ClientStatus())
	}
	if !scalar(r.code) {
		r.code = strconv.AppendInt(nil, int64(f.Status), 10)
	}
	if !scalar(r.param) {
		r.param = []byte("null")
	}
	return r
}

// codeText is the code as the Responses API's error event holds it (a string): a JSON string's
// text, a number's digits.
func (r redacted) codeText() string {
	var s string
	if json.Unmarshal(r.code, &s) != nil {
		return string(r.code)
	}
	return s
}

// appendRedactedEnvelope appends the envelope of f's redacted error.
func appendRedactedEnvelope(dst []byte, f *Fault) []byte {
	r := redactedError(f)
	inner, err := json.Marshal(struct {
		Message string          `json:"message"`
		Type    string          `json:"type"`
		Param   json.RawMessage `json:"param"`
		Code    json.RawMessage `json:"code"`
	}{r.message, r.typ, r.param, r.code})
	if err != nil { // unreachable: the raw members are checked scalars
		return AppendErrorEnvelope(dst, ErrorBody{Message: "engine reported an error", Type: ErrorType(f.ClientStatus()), Code: f.Kind.String()})
	}
	return AppendEnvelope(dst, inner)
}

// scalar says v is a JSON string or number as the engine sent it.
func scalar(v []byte) bool {
	return len(v) > 0 && (v[0] == '"' || v[0] == '-' || (v[0] >= '0' && v[0] <= '9')) && json.Valid(v)
}
