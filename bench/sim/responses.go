package sim

import (
	"strconv"
	"strings"

	json "github.com/goccy/go-json"
)

// responsesShape renders /v1/responses like vLLM's ResponsesResponse and its typed stream
// events. A stream opens, as soon as its headers are out, with response.created and
// response.in_progress (both carry the response, status "in_progress", no output); the first
// token brings response.output_item.added and response.content_part.added; each token is a
// response.output_text.delta; the end is output_text.done, content_part.done,
// output_item.done and response.completed (response.incomplete when max_output_tokens cut
// it), which carries the whole response with its usage. There is no [DONE]. Every event is
// "event: <type>\ndata: {...}" with a sequence_number counted from 0. A failure inside the
// stream is an "error" event ({"type":"error","code","message","param","sequence_number"}).
// The output is content tokens only (the reasoning and tool_call faults do not apply). A
// prefill leg's body carries kv_transfer_params after the response's own fields.
type responsesShape struct {
	g      *generation
	seq    int
	itemID string
}

func newResponsesShape(g *generation) *responsesShape {
	return &responsesShape{g: g, itemID: "msg_" + strings.TrimPrefix(g.id, "resp_")}
}

// event replaces the "data: " begin() put in b by a typed event header and opens its data.
func (s *responsesShape) event(b []byte, typ string) []byte {
	b = append(b, "event: "...)
	b = append(b, typ...)
	b = append(b, "\ndata: {\"type\":\""...)
	b = append(b, typ...)
	b = append(b, `","sequence_number":`...)
	b = appendInt(b, s.seq)
	s.seq++
	return b
}

// next separates two events written in one SSE write.
func next(b []byte) []byte { return append(b, "\n\n"...) }

func trimData(b []byte) []byte { return b[:len(b)-len("data: ")] }

// appendOpen appends response.created and response.in_progress; stream() sends them right
// after the headers, before the first token.
func (s *responsesShape) appendOpen(b []byte) []byte {
	b = s.event(trimData(b), "response.created")
	b = append(b, `,"response":`...)
	b = s.appendObject(b, "in_progress", "", false, nil)
	b = next(append(b, '}'))
	b = s.event(b, "response.in_progress")
	b = append(b, `,"response":`...)
	b = s.appendObject(b, "in_progress", "", false, nil)
	return append(b, '}')
}

func (s *responsesShape) appendStart(b []byte) ([]byte, bool) {
	b = s.event(trimData(b), "response.output_item.added")
	b = append(b, `,"output_index":0,"item":{"id":`...)
	b = appendString(b, s.itemID)
	b = append(b, `,"content":[],"role":"assistant","status":"in_progress","type":"message"}}`...)
	b = next(b)
	b = s.event(b, "response.content_part.added")
	b = append(b, `,"item_id":`...)
	b = appendString(b, s.itemID)
	b = append(b, `,"output_index":0,"content_index":0,"part":{"annotations":[],"text":"","type":"output_text","logprobs":null}}`...)
	return b, true
}

func (s *responsesShape) appendPiece(b []byte, i int, finish string) []byte {
	b = s.event(trimData(b), "response.output_text.delta")
	b = append(b, `,"item_id":`...)
	b = appendString(b, s.itemID)
	b = append(b, `,"output_index":0,"content_index":0,"delta":`...)
	b = appendString(b, TokenText(i))
	b = append(b, `,"logprobs":[]}`...)
	if finish != "" {
		b = s.appendClose(next(b), finish)
	}
	return b
}

func (s *responsesShape) appendFinish(b []byte, finish string) []byte {
	return s.appendClose(trimData(b), finish)
}

// appendClose appends the events that end the stream, the last one carrying the response.
func (s *responsesShape) appendClose(b []byte, finish string) []byte {
	text := s.g.plan.joined(pieceContent)
	b = s.event(b, "response.output_text.done")
	b = append(b, `,"item_id":`...)
	b = appendString(b, s.itemID)
	b = append(b, `,"output_index":0,"content_index":0,"text":`...)
	b = appendString(b, text)
	b = append(b, `,"logprobs":[]}`...)
	b = next(b)
	b = s.event(b, "response.content_part.done")
	b = append(b, `,"item_id":`...)
	b = appendString(b, s.itemID)
	b = append(b, `,"output_index":0,"content_index":0,"part":`...)
	b = s.appendPart(b, text)
	b = append(b, '}')
	b = next(b)
	b = s.event(b, "response.output_item.done")
	b = append(b, `,"output_index":0,"item":`...)
	b = s.appendItem(b, text)
	b = append(b, '}')
	b = next(b)
	status := "completed"
	if finish == "length" {
		status = "incomplete"
	}
	b = s.event(b, "response."+status)
	b = append(b, `,"response":`...)
	b = s.appendObject(b, status, text, true, nil)
	return append(b, '}')
}

// appendUsage is never called: a Responses stream's usage is in its last event.
func (s *responsesShape) appendUsage(b []byte) []byte { return b }

func (s *responsesShape) appendResponse(b []byte, finish string, kv []byte) []byte {
	status := "completed"
	if finish == "length" {
		status = "incomplete"
	}
	if s.g.req.leg != legPrefill {
		kv = nil // vLLM's ResponsesResponse has no kv_transfer_params unless a connector set them
	}
	return s.appendObject(b, status, s.g.plan.joined(pieceContent), true, kv)
}

func (s *responsesShape) appendPart(b []byte, text string) []byte {
	b = append(b, `{"annotations":[],"text":`...)
	b = appendString(b, text)
	return append(b, `,"type":"output_text","logprobs":null}`...)
}

func (s *responsesShape) appendItem(b []byte, text string) []byte {
	b = append(b, `{"id":`...)
	b = appendString(b, s.itemID)
	b = append(b, `,"content":[`...)
	b = s.appendPart(b, text)
	return append(b, `],"role":"assistant","status":"completed","type":"message"}`...)
}

// appendObject appends the response object; output and usage only once it is done.
func (s *responsesShape) appendObject(b []byte, status, text string, done bool, kv []byte) []byte {
	g := s.g
	b = append(b, `{"id":`...)
	b = appendString(b, g.id)
	b = append(b, `,"created_at":`...)
	b = strconv.AppendInt(b, g.created, 10)
	b = append(b, `,"incomplete_details":`...)
	if status == "incomplete" {
		b = append(b, `{"reason":"max_output_tokens"}`...)
	} else {
		b = append(b, "null"...)
	}
	b = append(b, `,"instructions":`...)
	b = append(b, orNullJSON(g.req.instructions)...)
	b = append(b, `,"metadata":null,"model":`...)
	b = appendString(b, g.req.model)
	b = append(b, `,"object":"response","output":[`...)
	if done {
		b = s.appendItem(b, text)
	}
	b = append(b, `],"parallel_tool_calls":true,"temperature":1.0,"tool_choice":"auto","tools":[],"top_p":1.0,"background":false,"max_output_tokens":`...)
	if g.req.maxTokens > 0 {
		b = appendInt(b, g.req.maxTokens)
	} else {
		b = appendInt(b, g.e.opts.MaxModelLen-g.req.promptTokens)
	}
	b = append(b, `,"previous_response_id":null,"reasoning":null,"service_tier":"auto","status":`...)
	b = appendString(b, status)
	b = append(b, `,"text":null,"truncation":"disabled","usage":`...)
	if done {
		out := g.plan.len()
		b = append(b, `{"input_tokens":`...)
		b = appendInt(b, g.req.promptTokens)
		b = append(b, `,"input_tokens_details":{"cached_tokens":`...)
		b = appendInt(b, g.cachedTokens())
		b = append(b, `},"output_tokens":`...)
		b = appendInt(b, out)
		b = append(b, `,"output_tokens_details":{"reasoning_tokens":0},"total_tokens":`...)
		b = appendInt(b, g.req.promptTokens+out)
		b = append(b, '}')
	} else {
		b = append(b, "null"...)
	}
	b = append(b, `,"user":null`...)
	if kv != nil {
		b = append(b, `,"kv_transfer_params":`...)
		b = append(b, kv...)
	}
	return append(b, '}')
}

// appendError appends the stream's error event for a simulated failure with HTTP code.
func (s *responsesShape) appendError(b []byte, e *apiError) []byte {
	b = s.event(trimData(b), "error")
	b = append(b, `,"code":`...)
	b = appendString(b, strconv.Itoa(e.code))
	b = append(b, `,"message":`...)
	b = appendString(b, e.message)
	return append(b, `,"param":null}`...)
}

func orNullJSON(raw json.RawMessage) []byte {
	if len(raw) == 0 {
		return []byte("null")
	}
	return raw
}

// responsesTexts returns the text of a Responses request in prompt order: the instructions,
// then the input (a string, or a list of items whose content is a string or a list of
// input_text parts), one entry per item; the last entry is the last item's.
func responsesTexts(raw, instructions json.RawMessage) ([]string, *apiError) {
	if len(raw) == 0 || string(raw) == "null" {
		return nil, invalidRequest("input", "Field required: input")
	}
	var out []string
	if len(instructions) > 0 && string(instructions) != "null" {
		var s string
		if err := json.Unmarshal(instructions, &s); err != nil {
			return nil, invalidRequest("instructions", "instructions must be a string")
		}
		out = append(out, s)
	}
	if raw[0] == '"' {
		var s string
		if err := json.Unmarshal(raw, &s); err != nil {
			return nil, invalidRequest("input", "invalid input: "+err.Error())
		}
		return append(out, s), nil
	}
	var items []struct {
		Content json.RawMessage `json:"content"`
	}
	if err := json.Unmarshal(raw, &items); err != nil {
		return nil, invalidRequest("input", "input must be a string or a list of input items")
	}
	if len(items) == 0 {
		return nil, invalidRequest("input", "input must not be empty")
	}
	for i, it := range items {
		var text string
		if len(it.Content) > 0 && it.Content[0] == '"' {
			_ = json.Unmarshal(it.Content, &text)
		} else if len(it.Content) > 0 && string(it.Content) != "null" {
			var parts []wireContentPart
			if err := json.Unmarshal(it.Content, &parts); err != nil {
				return nil, invalidRequest("input", "input["+strconv.Itoa(i)+"].content: want a string or a list of content parts")
			}
			var sb strings.Builder
			for _, p := range parts {
				if p.Type == "input_text" || p.Type == "output_text" || p.Type == "text" {
					if sb.Len() > 0 {
						sb.WriteByte(' ')
					}
					sb.WriteString(p.Text)
				}
			}
			text = sb.String()
		}
		out = append(out, text)
	}
	return out, nil
}
