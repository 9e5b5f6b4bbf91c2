package loadgen

import (
	"bufio"
	"bytes"
	"errors"
	"io"

	"github.com/narwhal-router/narwhal/bench/sim"
)

// sseReader splits a text/event-stream into the data of each event.
type sseReader struct {
	br      *bufio.Reader
	scratch []byte // the current event's data
	long    []byte // a line longer than br's buffer
}

// next returns the data of the next event that has any (comments and empty events are
// skipped). The slice is valid until the next call. At the stream's end it returns io.EOF;
// an event cut by the end returns io.ErrUnexpectedEOF.
func (r *sseReader) next() ([]byte, error) {
	r.scratch = r.scratch[:0]
	lines := 0
	for {
		line, err := r.readLine()
		if err != nil {
			if errors.Is(err, io.EOF) {
				if lines == 0 && len(bytes.TrimSpace(line)) == 0 {
					return nil, io.EOF
				}
				return nil, io.ErrUnexpectedEOF
			}
			return nil, err
		}
		line = bytes.TrimRight(line, "\r\n")
		if len(line) == 0 {
			if lines > 0 {
				return r.scratch, nil
			}
			continue
		}
		v, ok := bytes.CutPrefix(line, []byte("data:"))
		if !ok {
			continue // comments (": ping"), event:, id:, retry:
		}
		v = bytes.TrimPrefix(v, []byte(" "))
		if lines > 0 {
			r.scratch = append(r.scratch, '\n')
		}
		r.scratch = append(r.scratch, v...)
		lines++
	}
}

// readLine returns the next line, however long; the slice is valid until the next call.
func (r *sseReader) readLine() ([]byte, error) {
	line, err := r.br.ReadSlice('\n')
	if !errors.Is(err, bufio.ErrBufferFull) {
		return line, err
	}
	r.long = append(r.long[:0], line...)
	for errors.Is(err, bufio.ErrBufferFull) {
		line, err = r.br.ReadSlice('\n')
		r.long = append(r.long, line...)
	}
	return r.long, err
}

// streamCheck follows one routed stream and decides its outcome: exactly one of [DONE] (with
// every token in order) or one terminal error event, and nothing after either.
type streamCheck struct {
	tokens    int
	roles     int
	done      bool
	errCode   string // the terminal error event's code
	violation string
}

var (
	doneData    = []byte("[DONE]")
	errorPrefix = []byte(`{"error"`)
	contentKey  = []byte(`"content":"`)
	textKey     = []byte(`"text":"`)
	roleKey     = []byte(`"role":"`)
	codeKey     = []byte(`"code":`)
)

// event takes one event's data and reports whether it carried a generated token.
func (c *streamCheck) event(data []byte) bool {
	if c.done || c.errCode != "" {
		c.violate(afterTerminal(c.done, data))
		return false
	}
	switch {
	case bytes.Equal(data, doneData):
		c.done = true
		return false
	case bytes.HasPrefix(data, errorPrefix):
		c.errCode = errorCode(data)
		return false
	}
	if bytes.Contains(data, roleKey) {
		c.roles++
		if c.roles > 1 {
			c.violate("a second role delta (output of two attempts)")
		}
	}
	text, ok := stringAfter(data, contentKey)
	if !ok {
		text, ok = stringAfter(data, textKey)
	}
	if !ok || len(text) == 0 {
		return false // the role delta, usage, an empty delta
	}
	if string(text) != sim.TokenText(c.tokens) {
		c.violate("a token out of order or repeated")
	}
	c.tokens++
	return true
}

func afterTerminal(done bool, data []byte) string {
	switch {
	case done && bytes.HasPrefix(data, errorPrefix):
		return "an error event after [DONE]"
	case done:
		return "events after [DONE]"
	case bytes.Equal(data, doneData):
		return "[DONE] after an error event"
	case bytes.HasPrefix(data, errorPrefix):
		return "two error events"
	}
	return "events after the error event"
}

func (c *streamCheck) violate(v string) {
	if c.violation == "" {
		c.violation = v
	}
}

// end closes the check at the stream's end (err from the reader: io.EOF is a clean end) and
// returns the outcome's error class or violation.
func (c *streamCheck) end(readErr error, wantTokens int) (ok bool, errClass, violation string) {
	switch {
	case c.violation != "":
		return false, "", c.violation
	case readErr != nil && !errors.Is(readErr, io.EOF):
		if c.done || c.errCode != "" {
			return false, "", "the connection broke after the terminal event"
		}
		return false, "", "the stream broke without [DONE] or an error event"
	case c.errCode != "":
		return false, "sse_error " + c.errCode, ""
	case !c.done:
		return false, "", "the stream ended without [DONE] or an error event"
	case c.tokens != wantTokens:
		return false, "short output", ""
	}
	return true, "", ""
}

// stringAfter returns the JSON string value that starts right after key (whose last byte is
// the opening quote). Escapes are kept as they are: the simulator's tokens have none.
func stringAfter(data, key []byte) ([]byte, bool) {
	i := bytes.Index(data, key)
	if i < 0 {
		return nil, false
	}
	v := data[i+len(key):]
	for j := 0; j < len(v); j++ {
		switch v[j] {
		case '\\':
			j++
		case '"':
			return v[:j], true
		}
	}
	return nil, false
}

// errorCode reads the code of an {"error":{...,"code":X}} envelope: a string's content, a
// number's digits, or "unknown".
func errorCode(data []byte) string {
	i := bytes.LastIndex(data, codeKey)
	if i < 0 {
		return "unknown"
	}
	v := bytes.TrimLeft(data[i+len(codeKey):], " ")
	if len(v) > 0 && v[0] == '"' {
		if s, ok := stringAfter(v, []byte(`"`)); ok && len(s) > 0 {
			return string(s)
		}
		return "unknown"
	}
	j := 0
	for j < len(v) && v[j] != ',' && v[j] != '}' && v[j] != ' ' {
		j++
	}
	if j == 0 || string(v[:j]) == "null" {
		return "unknown"
	}
	return string(v[:j])
}
