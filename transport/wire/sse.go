package wire

import (
	"bufio"
	"bytes"
	"errors"
	"io"
	"strconv"

	"github.com/goccy/go-json"
)

// EventReader splits an engine's text/event-stream body into events. An event is returned with its
// raw bytes, terminating blank line included, so it can be relayed byte for byte.
type EventReader struct {
	br LineSource
	ev []byte
}

// LineSource is what an EventReader takes lines from. *bufio.Reader is one; so is a reader that
// undoes a body's HTTP framing in place (transport), which returns a piece of a line with
// bufio.ErrBufferFull where a chunk ends inside it.
type LineSource interface {
	// ReadSlice is bufio.Reader's: the bytes up to and including delim, valid until the next call.
	ReadSlice(delim byte) ([]byte, error)
	// Buffered is how many bytes can be read without waiting.
	Buffered() int
}

// NewEventReader reads events from br.
func NewEventReader(br LineSource) EventReader { return EventReader{br: br} }

// EventKind says what an SSE event of a decode stream carries.
type EventKind uint8

// Event kinds.
const (
	EventMeta  EventKind = iota // no generated output: comments, the role delta, empty deltas
	EventToken                  // generated output: text, content, reasoning, a tool call or a finish
	EventUsage                  // the usage chunk
	EventDone                   // data: [DONE]
	EventError                  // an error object inside the 200 stream
)

// maxEventBytes bounds one event; a longer one is an engine fault, not a reason to grow memory.
const maxEventBytes = 4 << 20

// ErrEventTooLarge is the read error for an event over the bound.
var ErrEventTooLarge = errors.New("engine sent an SSE event larger than 4 MiB")

// Next returns the next event. The slice is valid until the following call. At a clean end of
// stream it returns io.EOF; a stream that ends inside an event returns io.ErrUnexpectedEOF.
func (r *EventReader) Next() ([]byte, error) {
	r.ev = r.ev[:0]
	lineOff := 0 // where the line being read starts in r.ev (it may come in pieces)
	for {
		line, err := r.br.ReadSlice('\n')
		if len(line) > 0 {
			if len(r.ev)+len(line) > maxEventBytes {
				return nil, ErrEventTooLarge
			}
			r.ev = append(r.ev, line...)
			if err == nil { // a whole line: a blank one ends the event
				if isBlankLine(r.ev[lineOff:]) {
					if lineOff == 0 {
						r.ev = r.ev[:0] // stray blank line between events
						continue
					}
					return r.ev, nil
				}
				lineOff = len(r.ev)
			}
		}
		switch {
		case err == nil:
		case errors.Is(err, bufio.ErrBufferFull):
			// a long line, or one split by the body's framing: keep appending until its newline
		case errors.Is(err, io.EOF):
			if len(r.ev) == 0 {
				return nil, io.EOF
			}
			return nil, io.ErrUnexpectedEOF
		default:
			return nil, err
		}
	}
}

// Buffered reports whether the next event may already be in memory, so a relay can batch writes.
func (r *EventReader) Buffered() bool { return r.br.Buffered() > 0 }

func isBlankLine(line []byte) bool {
	return len(line) == 1 || (len(line) == 2 && line[0] == '\r')
}

// EventData returns the data payload of an event: the text after "data:" of a single-line event,
// or the data lines joined by '\n'. A comment-only event has no data.
func EventData(ev []byte) []byte {
	var out []byte
	n := 0
	for len(ev) > 0 {
		i := bytes.IndexByte(ev, '\n')
		line := ev
		if i >= 0 {
			line, ev = ev[:i], ev[i+1:]
		} else {
			ev = nil
		}
		line = bytes.TrimSuffix(line, []byte("\r"))
		if !bytes.HasPrefix(line, []byte("data:")) {
			continue
		}
		v := line[5:]
		if len(v) > 0 && v[0] == ' ' {
			v = v[1:]
		}
		if n == 0 {
			out = v
		} else {
			if n == 1 {
				out = append([]byte(nil), out...)
			}
			out = append(append(out, '\n'), v...)
		}
		n++
	}
	return out
}

var doneData = []byte("[DONE]")

// Classify says what an event's data carries. A finish_reason counts as output: an engine that
// stops at once (end of sequence) still answered the request.
//
// The verdict is the one a decoding of the data into the struct streamChunk gives, which is how
// Classify worked before: any syntax or type error is EventMeta, a duplicate key counts as its
// last occurrence (an object under "delta" is decoded into the one before it, null resets it),
// keys match case-insensitively. Classify reaches it without decoding or allocating: json.Valid
// checks the grammar, then the members Classify reads are found in place (scanChunk). Rare
// shapes whose decoding depends on the decoder's memory reuse — a second "choices" array decoded
// into the first one's elements, keys with escapes or non-ASCII bytes (Unicode case folding) —
// are decoded as before.
func Classify(data []byte) EventKind {
	if data == nil {
		return EventMeta
	}
	if bytes.Equal(data, doneData) {
		return EventDone
	}
	if IsErrorData(data) {
		return EventError
	}
	if !json.Valid(data) {
		return EventMeta // the decoder fails on it
	}
	if k, ok := scanChunk(data); ok {
		return k
	}
	return classifyDecoded(data)
}

// scanChunk classifies valid JSON in place; ok is false for the shapes Classify decodes instead.
// It descends into the members it reads and skips the others, so each byte is looked at once.
func scanChunk(data []byte) (kind EventKind, ok bool) {
	i := SkipSpace(data, 0)
	if data[i] != '{' {
		return EventMeta, true // null decodes to nothing; any other value is a type error
	}
	var (
		choices    bool // "choices" was seen
		choicesNil = true
		choicesLen int
		token      bool
		usage, dlt []byte // the last "usage" and "delta" values
		typ        []byte // the last string "type" (quoted); null leaves it as it was
	)
	for i++; ; {
		key, plain, v, more := nextKey(data, i)
		if !more {
			break
		}
		if !plain {
			return 0, false
		}
		f := chunkKey(key)
		if f != keyChoices {
			i, _ = SkipValue(data, v)
		}
		switch f {
		case keyChoices:
			if choices {
				// decoded into the elements (and the spare capacity) of the first array
				return 0, false
			}
			choices = true
			switch data[v] {
			case 'n':
				i = v + 4
				continue
			case '[':
			default:
				return EventMeta, true // type error
			}
			choicesNil = false
			for j := v + 1; ; choicesLen++ {
				e, more := nextElement(data, j)
				if !more {
					i = e
					break
				}
				switch data[e] {
				case 'n': // a zero element
					j = e + 4
				case '{':
					t, end, typeErr, plain := scanChoice(data, e)
					if !plain {
						return 0, false
					}
					if typeErr {
						return EventMeta, true
					}
					token = token || t
					j = end
				default:
					return EventMeta, true // type error
				}
			}
		case keyUsage:
			usage = data[v:i]
		case keyType:
			switch data[v] {
			case 'n':
			case '"':
				typ = data[v:i]
			default:
				return EventMeta, true // type error
			}
		case keyDelta:
			dlt = data[v:i]
		}
	}
	if len(typ) > 2 && choicesNil { // a non-empty type: any escape decodes to a byte at least
		t := typ[1 : len(typ)-1]
		if bytes.IndexByte(t, '\\') >= 0 {
			var s string
			_ = json.Unmarshal(typ, &s) // valid JSON: it cannot fail
			t = []byte(s)
		}
		return classifyResponses(t, dlt), true
	}
	if token {
		return EventToken, true
	}
	if choicesLen == 0 && len(usage) > 0 && !IsNull(usage) {
		return EventUsage, true
	}
	return EventMeta, true
}

// scanChoice reads the element of "choices" at data[i] == '{': whether it carries output, the
// offset past it, whether it has a type error, and plain false if a key needs the decoder.
func scanChoice(data []byte, i int) (token bool, end int, typeErr, plain bool) {
	var text, finish, delta, content, reasoning, reasoningContent, toolCalls bool
	var f chunkField
	for i++; ; {
		key, plain, v, more := nextKey(data, i)
		if !more {
			end = v
			break
		}
		if !plain {
			return false, 0, false, false
		}
		f = chunkKey(key)
		switch f {
		case keyText:
			if text, i, typeErr = stringState(data, v); typeErr {
				return false, 0, true, true
			}
			continue
		case keyFinishReason:
			if _, i, typeErr = stringState(data, v); typeErr {
				return false, 0, true, true
			}
			finish = data[v] == '"' // an empty reason is a reason too
			continue
		case keyDelta:
			switch data[v] {
			case 'n': // the pointer is reset; a later object is a new delta
				delta = false
				i = v + 4
				continue
			case '{':
			default:
				return false, 0, true, true
			}
			if !delta { // a new delta; a second object is decoded into the same one
				delta, content, reasoning, reasoningContent, toolCalls = true, false, false, false, false
			}
			for j := v + 1; ; {
				key, plain, w, more := nextKey(data, j)
				if !more {
					i = w
					break
				}
				if !plain {
					return false, 0, false, false
				}
				f = chunkKey(key)
				var p *bool
				switch f {
				case keyContent:
					p = &content
				case keyReasoning:
					p = &reasoning
				case keyReasoningContent:
					p = &reasoningContent
				case keyToolCalls:
					j, _ = SkipValue(data, w)
					toolCalls = j-w > 2 && !IsNull(data[w:j])
					continue
				default:
					j, _ = SkipValue(data, w)
					continue
				}
				if *p, j, typeErr = stringState(data, w); typeErr {
					return false, 0, true, true
				}
			}
			continue
		}
		i, _ = SkipValue(data, v)
	}
	return finish || text || (delta && (content || reasoning || reasoningContent || toolCalls)), end, false, true
}

// stringState is what the *string member at data[i] decodes to: non-empty, or a type error (null
// and "" are neither); end is the offset past it.
func stringState(data []byte, i int) (nonEmpty bool, end int, typeErr bool) {
	switch data[i] {
	case 'n':
		return false, i + 4, false
	case '"':
		end, _ = skipString(data, i)
		return end-i > 2, end, false // any escape decodes to at least one byte
	}
	return false, 0, true
}

// chunkField names the keys scanChunk reads.
type chunkField uint8

const (
	keyOther chunkField = iota
	keyChoices
	keyUsage
	keyType
	keyDelta
	keyText
	keyFinishReason
	keyContent
	keyReasoning
	keyReasoningContent
	keyToolCalls
)

// chunkKey says which field the plain quoted key raw names, matching as the decoder does: ASCII
// case does not matter. (A key with an escape or a non-ASCII byte, which may fold to an ASCII
// letter like U+017F to s, is left to the decoder.)
func chunkKey(raw []byte) chunkField {
	inner := raw[1 : len(raw)-1]
	var f chunkField
	var name string
	switch len(inner) {
	case 4:
		f, name = keyText, "text"
		if inner[1]|0x20 == 'y' {
			f, name = keyType, "type"
		}
	case 5:
		f, name = keyUsage, "usage"
		if inner[0]|0x20 == 'd' {
			f, name = keyDelta, "delta"
		}
	case 7:
		f, name = keyChoices, "choices"
		if inner[1]|0x20 == 'o' {
			f, name = keyContent, "content"
		}
	case 9:
		f, name = keyReasoning, "reasoning"
	case 10:
		f, name = keyToolCalls, "tool_calls"
	case 13:
		f, name = keyFinishReason, "finish_reason"
	case 17:
		f, name = keyReasoningContent, "reasoning_content"
	default:
		return keyOther
	}
	if !asciiEqualFold(inner, name) {
		return keyOther
	}
	return f
}

// asciiEqualFold reports whether b is s regardless of ASCII case; s is lower-case letters and
// underscores. c|0x20 is the lower case of a letter c, and never an underscore (0x5f lacks 0x20).
func asciiEqualFold(b []byte, s string) bool {
	if len(b) != len(s) {
		return false
	}
	for i := range len(s) {
		if c := b[i]; c != s[i] && c|0x20 != s[i] {
			return false
		}
	}
	return true
}

// nextKey reads the next member of a valid JSON object at offset i (just past its '{' or past a
// member's value): its quoted key, whether the key is plain (no escape, ASCII) and the offset of
// its value. At the object's end more is false and val is the offset past its '}'.
func nextKey(data []byte, i int) (key []byte, plain bool, val int, more bool) {
	i = SkipSpace(data, i)
	if data[i] == ',' {
		i = SkipSpace(data, i+1)
	}
	if data[i] == '}' {
		return nil, false, i + 1, false
	}
	end, plain, _ := scanString(data, i, true)
	return data[i:end], plain, SkipSpace(data, SkipSpace(data, end)+1), true // past the ':'
}

// nextElement is nextKey for a valid JSON array: the offset of its next element, or, with more
// false, the offset past its ']'.
func nextElement(data []byte, i int) (val int, more bool) {
	i = SkipSpace(data, i)
	if data[i] == ',' {
		i = SkipSpace(data, i+1)
	}
	if data[i] == ']' {
		return i + 1, false
	}
	return i, true
}

// streamChunk is the part of a completion or chat chunk the router reads, for the events Classify
// decodes (classifyDecoded). Members it does not read (a choice's logprobs, an error) are left
// out: the decoder validates and skips them instead of copying them.
type streamChunk struct {
	Choices []struct {
		Text         *string     `json:"text"`
		Delta        *chunkDelta `json:"delta"`
		FinishReason *string     `json:"finish_reason"`
	} `json:"choices"`
	Usage json.RawMessage `json:"usage"`
	// Type and Delta are a Responses API event's (responses.go).
	Type  string          `json:"type"`
	Delta json.RawMessage `json:"delta"`
}

type chunkDelta struct {
	Content          *string         `json:"content"`
	Reasoning        *string         `json:"reasoning"`
	ReasoningContent *string         `json:"reasoning_content"`
	ToolCalls        json.RawMessage `json:"tool_calls"`
}

// classifyDecoded is Classify by decoding, for what scanChunk leaves to it.
func classifyDecoded(data []byte) EventKind {
	var c streamChunk
	if err := json.Unmarshal(data, &c); err != nil {
		return EventMeta
	}
	if c.Type != "" && c.Choices == nil {
		return classifyResponses([]byte(c.Type), c.Delta)
	}
	for _, ch := range c.Choices {
		if ch.FinishReason != nil || (ch.Text != nil && *ch.Text != "") {
			return EventToken
		}
		if d := ch.Delta; d != nil {
			if nonEmpty(d.Content) || nonEmpty(d.Reasoning) || nonEmpty(d.ReasoningContent) ||
				(len(d.ToolCalls) > 2 && !IsNull(d.ToolCalls)) {
				return EventToken
			}
		}
	}
	if len(c.Choices) == 0 && len(c.Usage) > 0 && !IsNull(c.Usage) {
		return EventUsage
	}
	return EventMeta
}

// ClassifyFast is Classify for the hot path after the first token: it classifies in full only
// events that mention usage (the last one, normally) and calls everything else a token.
func ClassifyFast(data []byte) EventKind {
	switch {
	case data == nil:
		return EventMeta
	case bytes.Equal(data, doneData):
		return EventDone
	case IsErrorData(data):
		return EventError
	case bytes.Contains(data, []byte(`"usage"`)), !bytes.Contains(data, []byte(`"choices"`)):
		return Classify(data) // the usage chunk, or a Responses event (typed, no choices)
	}
	return EventToken
}

func nonEmpty(s *string) bool { return s != nil && *s != "" }

// IsErrorData reports whether data is an error object: {"error": ...} at the top level.
func IsErrorData(data []byte) bool {
	i := SkipSpace(data, 0)
	if i >= len(data) || data[i] != '{' {
		return false
	}
	i = SkipSpace(data, i+1)
	return bytes.HasPrefix(data[i:], []byte(`"error"`))
}

// StreamError is an error object found inside a 200 stream, in vLLM's new or old envelope.
type StreamError struct {
	Status  int
	Message string
	Type    string
	// Body is the error object as the engine sent it (the value of "error").
	Body json.RawMessage
}

// ParseStreamError reads an error event's data. The status is the error's own code; a missing
// or implausible code is treated as 500 (the engine failed, it did not say how).
func ParseStreamError(data []byte) StreamError {
	if se, ok := parseResponsesError(data); ok {
		return se
	}
	var env struct {
		Error json.RawMessage `json:"error"`
	}
	_ = json.Unmarshal(data, &env)
	var e struct {
		Message string `json:"message"`
		Type    string `json:"type"`
		Code    any    `json:"code"`
	}
	_ = json.Unmarshal(env.Error, &e)
	se := StreamError{Status: 500, Message: e.Message, Type: e.Type, Body: env.Error}
	switch c := e.Code.(type) {
	case float64:
		if c >= 400 && c <= 599 {
			se.Status = int(c)
		}
	case json.Number:
		if n, err := c.Int64(); err == nil && n >= 400 && n <= 599 {
			se.Status = int(n)
		}
	}
	if se.Message == "" {
		se.Message = "engine reported an error inside the stream"
	}
	return se
}

// UsageOf returns the usage object of an event's data, if it has one.
func UsageOf(data []byte) json.RawMessage {
	var c struct {
		Usage json.RawMessage `json:"usage"`
	}
	_ = json.Unmarshal(data, &c)
	return c.Usage
}

// OutputTokensOf reads an event's usage.completion_tokens (or usage.output_tokens, the
// Responses API's name), or returns fallback: what UsageOf and CompletionTokens read together,
// scanned in place without decoding or allocating (the relay asks once per stream).
func OutputTokensOf(data []byte, fallback int) int {
	var top, inner [16]Field
	fields, err := ScanObject(data, top[:0])
	if err != nil {
		return fallback
	}
	usage, ok := Member(data, fields, "usage")
	if !ok {
		return fallback
	}
	if fields, err = ScanObject(usage, inner[:0]); err != nil {
		return fallback
	}
	for _, key := range [...]string{"completion_tokens", "output_tokens"} {
		if v, ok := Member(usage, fields, key); ok {
			if n, err := strconv.Atoi(string(v)); err == nil {
				return n
			}
		}
	}
	return fallback
}

// CompletionTokens reads completion_tokens from a usage object, or returns fallback.
func CompletionTokens(usage json.RawMessage, fallback int) int {
	if len(usage) == 0 {
		return fallback
	}
	var u struct {
		CompletionTokens *int `json:"completion_tokens"`
		OutputTokens     *int `json:"output_tokens"` // the Responses API's name
	}
	if err := json.Unmarshal(usage, &u); err != nil {
		return fallback
	}
	switch {
	case u.CompletionTokens != nil:
		return *u.CompletionTokens
	case u.OutputTokens != nil:
		return *u.OutputTokens
	}
	return fallback
}
