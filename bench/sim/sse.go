package sim

import (
	"net/http"
	"time"
)

var doneEvent = []byte("data: [DONE]\n\n")

// sseWriter writes one server-sent-events response the way vLLM does: every event is
// "data: <json>\n\n", flushed on its own; the stream ends with "data: [DONE]\n\n".
type sseWriter struct {
	w   http.ResponseWriter
	rc  *http.ResponseController
	buf []byte
	// last is when the stream last sent something (headers included).
	last time.Time
}

// startSSE commits a 200 with vLLM's event-stream headers and flushes them.
func startSSE(w http.ResponseWriter) (*sseWriter, error) {
	s := &sseWriter{w: w, rc: http.NewResponseController(w), buf: make([]byte, 0, 512)}
	w.Header().Set("Content-Type", "text/event-stream; charset=utf-8")
	w.WriteHeader(http.StatusOK)
	s.last = time.Now()
	return s, s.rc.Flush()
}

// begin returns the writer's buffer holding the start of an event; append the JSON
// payload to it and pass it to end.
func (s *sseWriter) begin() []byte { return append(s.buf[:0], "data: "...) }

// end finishes the event begun with begin, writes and flushes it.
func (s *sseWriter) end(b []byte) error {
	b = append(b, "\n\n"...)
	s.buf = b
	return s.write(b)
}

// done writes the terminating [DONE] event.
func (s *sseWriter) done() error { return s.write(doneEvent) }

// comment writes an SSE comment line (": text"), which clients ignore; proxies and some
// servers send them to keep an idle stream alive.
func (s *sseWriter) comment(text string) error {
	return s.write(append(append(append(s.buf[:0], ": "...), text...), "\n\n"...))
}

func (s *sseWriter) write(b []byte) error {
	s.last = time.Now()
	if _, err := s.w.Write(b); err != nil {
		return err
	}
	return s.rc.Flush()
}
