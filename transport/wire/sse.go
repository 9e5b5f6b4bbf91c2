package wire

import (
	"bufio"
	"bytes"
	"errors"
	"io"

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

// ClassifyFast is Classify for the hot path after the first token: it classifies in full only
// events that mention usage (the last one, normally) and calls everything else a token.
func ClassifyFast(data []byte) EventKind {
	if k, ok := classifyFixed(data); ok {
		return k
	}
	if bytes.Contains(data, []byte(`"usage"`)) || !bytes.Contains(data, []byte(`"choices"`)) {
		return classifyChunk(data) // the usage chunk, or a Responses event (typed, no choices)
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
