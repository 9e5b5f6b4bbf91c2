package harness

import (
	"io"
	"net"
	"net/http"
	"sync/atomic"

	coltracepb "go.opentelemetry.io/proto/otlp/collector/trace/v1"
	"google.golang.org/protobuf/proto"
)

// TraceSink is an OTLP/HTTP trace receiver on loopback that decodes and counts what a router
// exports, then drops it: the collector a traced router arm exports to, so that the arm pays
// the whole export (spans made, batched, encoded and sent) and the report can say how many
// spans arrived.
type TraceSink struct {
	srv     *http.Server
	addr    string
	exports atomic.Int64
	spans   atomic.Int64
	bad     atomic.Int64
}

// StartTraceSink listens on a free loopback port.
func StartTraceSink() (*TraceSink, error) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, err
	}
	s := &TraceSink{addr: ln.Addr().String()}
	s.srv = &http.Server{Handler: http.HandlerFunc(s.serve)}
	go s.srv.Serve(ln)
	return s, nil
}

func (s *TraceSink) serve(w http.ResponseWriter, r *http.Request) {
	b, err := io.ReadAll(r.Body)
	var req coltracepb.ExportTraceServiceRequest
	if err != nil || proto.Unmarshal(b, &req) != nil {
		s.bad.Add(1)
		http.Error(w, "not an OTLP/HTTP protobuf trace export", http.StatusBadRequest)
		return
	}
	n := 0
	for _, rs := range req.ResourceSpans {
		for _, ss := range rs.ScopeSpans {
			n += len(ss.Spans)
		}
	}
	s.exports.Add(1)
	s.spans.Add(int64(n))
	w.Header().Set("Content-Type", "application/x-protobuf")
	w.WriteHeader(http.StatusOK) // an empty ExportTraceServiceResponse is zero bytes
}

// Endpoint is the sink's URL, for tracing.otlp_endpoint (protocol http).
func (s *TraceSink) Endpoint() string { return "http://" + s.addr }

// Received is the exports and spans decoded so far, and the requests that were not exports.
func (s *TraceSink) Received() (exports, spans, bad int64) {
	return s.exports.Load(), s.spans.Load(), s.bad.Load()
}

// Close stops the sink.
func (s *TraceSink) Close() { s.srv.Close() }
