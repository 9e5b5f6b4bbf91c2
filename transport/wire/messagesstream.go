package wire

import (
	"strconv"

	"github.com/goccy/go-json"
)

// MessagesStream translates a chat completions decode stream, chunk by chunk, into the events of
// a Messages stream, as vLLM's message_stream_converter does (vllm/entrypoints/anthropic/
// serving.py): message_start (then Anthropic's ping) on the first chunk; a content block per run
// of text, reasoning or tool call, opened with content_block_start, fed with content_block_delta
// (text_delta, thinking_delta, input_json_delta) and closed with content_block_stop; message_delta
// with the stop reason and the usage on the usage chunk; message_stop on [DONE]. Texts and tool
// arguments are copied as the engine escaped them, never decoded and re-encoded. The events of
// one chunk are returned together, in a buffer reused by the next call.
type MessagesStream struct {
	buf      []byte
	started  bool // message_start sent
	finished bool // message_delta sent
	open     string
	index    int // the open block's index; the next block's is index+1 (or 0)
	blocks   int // blocks started
	toolID   string
	toolIDs  map[int]string // a tool call's id by its chat index
	finish   string
	stop     json.RawMessage
}

// NewMessagesStream starts the translation of one stream.
func NewMessagesStream() *MessagesStream { return &MessagesStream{} }

// chunkView is what the translation reads of a chat chunk: raw JSON values, slices of the
// chunk (nil when absent), found by scanning in place.
type chunkView struct {
	id, model                    []byte
	finish, stop                 []byte // of choice 0
	content, reasoning, toolCall []byte // of choice 0's delta; toolCall is the tool_calls array
}

// view scans a chat chunk without decoding or allocating; ok is false when it is not a JSON
// object.
func (v *chunkView) view(data []byte) bool {
	var top, choice, delta [16]Field
	fs, err := ScanObject(data, top[:0])
	if err != nil {
		return false
	}
	v.id, _ = Member(data, fs, "id")
	v.model, _ = Member(data, fs, "model")
	choices, ok := Member(data, fs, "choices")
	if !ok || choices[0] != '[' {
		return true
	}
	it := openItems(0)
	for {
		i, more := it.element(choices)
		if !more {
			return true
		}
		end, err := SkipValue(choices, i)
		if err != nil {
			return true
		}
		it.end = end
		elem := choices[i:end]
		cfs, err := ScanObject(elem, choice[:0])
		if err != nil {
			continue
		}
		if idx, ok := Member(elem, cfs, "index"); ok && string(idx) != "0" {
			continue // the Messages API has one choice
		}
		v.finish, _ = Member(elem, cfs, "finish_reason")
		v.stop, _ = Member(elem, cfs, "stop_reason")
		d, ok := Member(elem, cfs, "delta")
		if !ok {
			return true
		}
		dfs, err := ScanObject(d, delta[:0])
		if err != nil {
			return true
		}
		v.content, _ = Member(d, dfs, "content")
		// Newer vLLM sends the text as both reasoning and the deprecated reasoning_content.
		if v.reasoning, _ = Member(d, dfs, "reasoning"); !nonEmptyString(v.reasoning) {
			v.reasoning, _ = Member(d, dfs, "reasoning_content")
		}
		v.toolCall, _ = Member(d, dfs, "tool_calls")
		return true
	}
}

// toolCallDelta is one element of a delta's tool_calls.
type toolCallDelta struct {
	Index    int             `json:"index"`
	ID       json.RawMessage `json:"id"`
	Function struct {
		Name      json.RawMessage `json:"name"`
		Arguments json.RawMessage `json:"arguments"`
	} `json:"function"`
}

// Event translates one event of the chat stream (its kind and data); usage is the stream's
// token counts as the client is told them (the cached tokens corrected), read on its usage
// event. It returns the Messages events to send, nothing for a chunk that carries none.
func (s *MessagesStream) Event(kind EventKind, data []byte, usage Tokens) []byte {
	s.buf = s.buf[:0]
	if kind == EventDone {
		s.finishMessage(usage)
		s.buf = appendEvent(s.buf, "message_stop", `{"type":"message_stop"}`)
		return s.buf
	}
	var c chunkView
	if !c.view(data) {
		return s.buf
	}
	if !s.started {
		s.started = true
		s.buf = append(s.buf, "event: message_start\ndata: {\"type\":\"message_start\",\"message\":{\"id\":"...)
		s.buf = appendStringOr(s.buf, c.id)
		s.buf = append(s.buf, `,"type":"message","role":"assistant","content":[],"model":`...)
		s.buf = appendStringOr(s.buf, c.model)
		s.buf = append(s.buf, `,"stop_reason":null,"stop_sequence":null,"usage":{"input_tokens":0,"output_tokens":0}}}`+"\n\n"...)
		s.buf = appendEvent(s.buf, "ping", `{"type":"ping"}`)
	}
	if kind == EventUsage {
		s.finishMessage(usage)
		return s.buf
	}
	if isString(c.finish) {
		_ = json.Unmarshal(c.finish, &s.finish)
		s.stop = append(s.stop[:0], c.stop...)
	}
	if nonEmptyString(c.reasoning) {
		s.startBlock("thinking", `{"type":"thinking","thinking":""}`)
		s.appendDelta(`{"type":"thinking_delta","thinking":`, c.reasoning)
	}
	if nonEmptyString(c.content) {
		s.startBlock("text", `{"type":"text","text":""}`)
		s.appendDelta(`{"type":"text_delta","text":`, c.content)
	}
	if len(c.toolCall) > 0 && c.toolCall[0] == '[' {
		var calls []toolCallDelta
		if json.Unmarshal(c.toolCall, &calls) == nil {
			s.toolCalls(calls)
		}
	}
	return s.buf
}

// toolCalls translates a delta's tool calls as vLLM does: a call with an id and a name opens a
// tool_use block; arguments feed the open call's block as input_json_delta.
func (s *MessagesStream) toolCalls(calls []toolCallDelta) {
	for _, tc := range calls {
		id := ""
		if isString(tc.ID) {
			_ = json.Unmarshal(tc.ID, &id)
			if s.toolIDs == nil {
				s.toolIDs = map[int]string{}
			}
			s.toolIDs[tc.Index] = id
			if id != s.toolID && isString(tc.Function.Name) {
				start := make([]byte, 0, 64)
				start = append(start, `{"type":"tool_use","id":`...)
				start = append(append(start, tc.ID...), `,"name":`...)
				start = append(append(start, tc.Function.Name...), `,"input":{}}`...)
				s.startBlock("tool_use", string(start))
				s.toolID = id
			}
		} else {
			id = s.toolIDs[tc.Index]
		}
		if id != "" && id == s.toolID && nonEmptyString(tc.Function.Arguments) {
			s.appendDelta(`{"type":"input_json_delta","partial_json":`, tc.Function.Arguments)
		}
	}
}

// appendStringOr appends v when it is a JSON string, else "".
func appendStringOr(dst, v []byte) []byte {
	if isString(v) {
		return append(dst, v...)
	}
	return append(dst, `""`...)
}

// nonEmptyString reports whether v is a JSON string with something in it.
func nonEmptyString(v []byte) bool { return isString(v) && len(v) > 2 }

// startBlock closes the open block unless it is of kind (a tool_use block always starts anew)
// and opens one of kind.
func (s *MessagesStream) startBlock(kind, contentBlock string) {
	if s.open == kind && kind != "tool_use" {
		return
	}
	s.stopBlock()
	s.open, s.index = kind, s.blocks
	s.blocks++
	s.buf = append(s.buf, "event: content_block_start\ndata: {\"type\":\"content_block_start\",\"index\":"...)
	s.buf = strconv.AppendInt(s.buf, int64(s.index), 10)
	s.buf = append(s.buf, `,"content_block":`...)
	s.buf = append(s.buf, contentBlock...)
	s.buf = append(s.buf, "}\n\n"...)
}

// appendDelta appends a content_block_delta of the open block: head, then the engine's JSON
// string as it sent it.
func (s *MessagesStream) appendDelta(head string, value []byte) {
	s.buf = append(s.buf, "event: content_block_delta\ndata: {\"type\":\"content_block_delta\",\"index\":"...)
	s.buf = strconv.AppendInt(s.buf, int64(s.index), 10)
	s.buf = append(s.buf, `,"delta":`...)
	s.buf = append(s.buf, head...)
	s.buf = append(s.buf, value...)
	s.buf = append(s.buf, "}}\n\n"...)
}

// stopBlock closes the open block, if any; a thinking block gets its signature first.
func (s *MessagesStream) stopBlock() {
	if s.open == "" {
		return
	}
	if s.open == "thinking" {
		sig, _ := json.Marshal(newSignature())
		s.appendDelta(`{"type":"signature_delta","signature":`, sig)
	}
	s.buf = append(s.buf, "event: content_block_stop\ndata: {\"type\":\"content_block_stop\",\"index\":"...)
	s.buf = strconv.AppendInt(s.buf, int64(s.index), 10)
	s.buf = append(s.buf, "}\n\n"...)
	s.open, s.toolID = "", ""
}

// finishMessage closes the open block and sends message_delta, once.
func (s *MessagesStream) finishMessage(usage Tokens) {
	if s.finished {
		return
	}
	s.finished = true
	s.stopBlock()
	reason, seq := stopReason(s.finish, s.stop)
	u := usageOf(usage)
	s.buf = append(s.buf, "event: message_delta\ndata: {\"type\":\"message_delta\",\"delta\":{\"stop_reason\":\""...)
	s.buf = append(s.buf, reason...)
	s.buf = append(s.buf, `","stop_sequence":`...)
	s.buf = append(s.buf, seq...)
	s.buf = append(s.buf, `},"usage":{"input_tokens":`...)
	s.buf = strconv.AppendInt(s.buf, int64(u.InputTokens), 10)
	s.buf = append(s.buf, `,"output_tokens":`...)
	s.buf = strconv.AppendInt(s.buf, int64(u.OutputTokens), 10)
	s.buf = append(s.buf, `,"cache_read_input_tokens":`...)
	s.buf = strconv.AppendInt(s.buf, int64(u.CacheReadInputTokens), 10)
	s.buf = append(s.buf, "}}\n\n"...)
}

func appendEvent(dst []byte, name, data string) []byte {
	dst = append(dst, "event: "...)
	dst = append(dst, name...)
	dst = append(dst, "\ndata: "...)
	dst = append(dst, data...)
	return append(dst, "\n\n"...)
}
