package tests

import (
	"context"
	"encoding/hex"
	"fmt"
	"io"
	"net"
	"net/http"
	"sort"
	"strings"
	"sync"
	"testing"

	coltracepb "go.opentelemetry.io/proto/otlp/collector/trace/v1"
	commonpb "go.opentelemetry.io/proto/otlp/common/v1"
	tracepb "go.opentelemetry.io/proto/otlp/trace/v1"
	"google.golang.org/grpc"
	"google.golang.org/grpc/metadata"
	"google.golang.org/protobuf/proto"

	"github.com/narwhal-router/narwhal/bench/sim"
	"github.com/narwhal-router/narwhal/config"
)

// OpenTelemetry traces as a collector receives them: the router exports over OTLP (gRPC or
// HTTP) to a receiver in the test that decodes the wire with the OTLP protobuf definitions, and
// the tests read the span trees from what it decoded.

// otlpSpan is one received span, flattened.
type otlpSpan struct {
	trace, id, parent string
	name              string
	kind              tracepb.Span_SpanKind
	attrs             map[string]string
	events            []string
	failed            bool // status code error
	service           string
}

// otlpReceiver collects the spans of every export it receives.
type otlpReceiver struct {
	coltracepb.UnimplementedTraceServiceServer
	mu      sync.Mutex
	spans   []otlpSpan
	exports int
	headers []string // a header named by the test, per export
	header  string
}

func (r *otlpReceiver) add(req *coltracepb.ExportTraceServiceRequest, header string) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.exports++
	r.headers = append(r.headers, header)
	for _, rs := range req.ResourceSpans {
		service := attrMap(rs.GetResource().GetAttributes())["service.name"]
		for _, ss := range rs.ScopeSpans {
			for _, s := range ss.Spans {
				r.spans = append(r.spans, otlpSpan{
					trace: hex.EncodeToString(s.TraceId), id: hex.EncodeToString(s.SpanId), parent: hex.EncodeToString(s.ParentSpanId),
					name: s.Name, kind: s.Kind, attrs: attrMap(s.Attributes), events: eventNames(s.Events),
					failed: s.GetStatus().GetCode() == tracepb.Status_STATUS_CODE_ERROR, service: service,
				})
			}
		}
	}
}

// Export implements the OTLP/gRPC trace service.
func (r *otlpReceiver) Export(ctx context.Context, req *coltracepb.ExportTraceServiceRequest) (*coltracepb.ExportTraceServiceResponse, error) {
	r.add(req, grpcHeader(ctx, r.header))
	return &coltracepb.ExportTraceServiceResponse{}, nil
}

// ServeHTTP implements OTLP/HTTP with protobuf bodies.
func (r *otlpReceiver) ServeHTTP(w http.ResponseWriter, req *http.Request) {
	b, _ := io.ReadAll(req.Body)
	var m coltracepb.ExportTraceServiceRequest
	if req.URL.Path != "/v1/traces" || req.Header.Get("Content-Type") != "application/x-protobuf" || proto.Unmarshal(b, &m) != nil {
		http.Error(w, "not an OTLP/HTTP protobuf trace export", http.StatusBadRequest)
		return
	}
	r.add(&m, req.Header.Get(r.header))
	out, _ := proto.Marshal(&coltracepb.ExportTraceServiceResponse{})
	w.Header().Set("Content-Type", "application/x-protobuf")
	w.Write(out)
}

// startOTLPReceiver listens for protocol ("grpc" or "http") on loopback and returns the
// receiver and the endpoint URL for tracing.otlp_endpoint. header names a request header the
// receiver records for each export.
func startOTLPReceiver(t *testing.T, protocol, header string) (*otlpReceiver, string) {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	r := &otlpReceiver{header: header}
	if protocol == config.TracingGRPC {
		srv := grpc.NewServer()
		coltracepb.RegisterTraceServiceServer(srv, r)
		go srv.Serve(ln)
		t.Cleanup(srv.Stop)
	} else {
		srv := &http.Server{Handler: r}
		go srv.Serve(ln)
		t.Cleanup(func() { srv.Close() })
	}
	return r, "http://" + ln.Addr().String()
}

// trees returns the received spans of each trace.
func (r *otlpReceiver) traces() map[string][]otlpSpan {
	r.mu.Lock()
	defer r.mu.Unlock()
	out := map[string][]otlpSpan{}
	for _, s := range r.spans {
		out[s.trace] = append(out[s.trace], s)
	}
	return out
}

// requestTrace returns the spans of the trace whose request span has narwhal.request_id id.
func (r *otlpReceiver) requestTrace(t *testing.T, id string) []otlpSpan {
	t.Helper()
	for _, spans := range r.traces() {
		for _, s := range spans {
			if s.attrs["narwhal.request_id"] == id {
				return spans
			}
		}
	}
	t.Fatalf("no trace for request %s among %d received spans", id, len(r.spans))
	return nil
}

// tree renders a trace as its span tree: one span a line, indented under its parent, with the
// attributes named in show.
func tree(spans []otlpSpan, show ...string) string {
	children := map[string][]otlpSpan{}
	ids := map[string]bool{}
	for _, s := range spans {
		ids[s.id] = true
	}
	for _, s := range spans {
		p := s.parent
		if !ids[p] {
			p = ""
		}
		children[p] = append(children[p], s)
	}
	var b strings.Builder
	var walk func(parent string, depth int)
	walk = func(parent string, depth int) {
		cs := children[parent]
		sort.SliceStable(cs, func(i, j int) bool {
			if a, b := cs[i].attrs["narwhal.attempt"], cs[j].attrs["narwhal.attempt"]; a != b {
				return a < b
			}
			return stepOrder(cs[i].name) < stepOrder(cs[j].name)
		})
		for _, s := range cs {
			fmt.Fprintf(&b, "%s%s", strings.Repeat("  ", depth), s.name)
			for _, k := range show {
				if v, ok := s.attrs[k]; ok {
					fmt.Fprintf(&b, " %s=%s", k, v)
				}
			}
			if s.failed {
				b.WriteString(" ERROR")
			}
			for _, e := range s.events {
				b.WriteString(" @" + e)
			}
			b.WriteString("\n")
			walk(s.id, depth+1)
		}
	}
	walk("", 0)
	return b.String()
}

func stepOrder(name string) int {
	return map[string]int{"prefill": 1, "handoff": 2, "decode": 3, "passthrough": 4}[name]
}

func attrMap(kvs []*commonpb.KeyValue) map[string]string {
	out := map[string]string{}
	for _, kv := range kvs {
		v := kv.Value
		switch v.Value.(type) {
		case *commonpb.AnyValue_StringValue:
			out[kv.Key] = v.GetStringValue()
		case *commonpb.AnyValue_IntValue:
			out[kv.Key] = fmt.Sprint(v.GetIntValue())
		case *commonpb.AnyValue_BoolValue:
			out[kv.Key] = fmt.Sprint(v.GetBoolValue())
		case *commonpb.AnyValue_DoubleValue:
			out[kv.Key] = "float"
		}
	}
	return out
}

func eventNames(es []*tracepb.Span_Event) []string {
	var out []string
	for _, e := range es {
		out = append(out, e.Name)
	}
	return out
}

// tracing returns a configuration tweak that exports spans to endpoint over protocol.
func tracing(protocol, endpoint string, ratio float64) func(*config.Config) {
	return func(c *config.Config) {
		c.Tracing = config.Tracing{OTLPEndpoint: endpoint, Protocol: protocol, SampleRatio: ratio, ServiceName: "narwhal-e2e",
			Headers: []config.TracingHeader{{Name: "x-scope-orgid", Value: "e2e"}}}
		c.Disaggregation.Policy, c.Disaggregation.MinPromptTokens = config.DisaggAuto, 8
	}
}

const longPrompt = "explain in a few words how a disaggregated router moves the KV cache of a prompt from one engine to another"

// The span trees of a disaggregated success continuing a client's trace, a local decode, a
// request retried after an engine fault, and a failure, as an OTLP/gRPC collector receives them;
// each engine leg carries its own span's traceparent.
func TestTracesReachAnOTLPCollector(t *testing.T) {
	recv, endpoint := startOTLPReceiver(t, config.TracingGRPC, "x-scope-orgid")
	h := start(t, setup{prefill: 1, decode: 1, engine: sim.Options{Tokens: 3}, config: configs(retries(2), tracing(config.TracingGRPC, endpoint, 1))})

	const clientTrace, clientSpan = "4bf92f3577b34da6a3ce929d0e0e4736", "00f067aa0ba902b7"
	disagg := h.send("/v1/completions", completion(longPrompt, true), "traceparent", "00-"+clientTrace+"-"+clientSpan+"-01", "tracestate", "vendor=x")
	expectDone(t, disagg)
	local := h.send("/v1/chat/completions", chat("hi", false))
	if local.status != 200 {
		t.Fatalf("local: %d %s", local.status, local.body)
	}
	h.inject("d0", "decode.status=500", 1)
	retried := h.send("/v1/completions", completion("retried: "+longPrompt, true))
	expectDone(t, retried)
	failed := h.send("/v1/completions", completion("@sim:prefill.bad_descriptor=bad_blocks "+longPrompt, false))
	expectError(t, failed, 502, "invalid_descriptor", "")
	unsampled := h.send("/v1/completions", completion("unsampled: "+longPrompt, true), "traceparent", "00-"+strings.Repeat("ab", 16)+"-"+clientSpan+"-00")
	expectDone(t, unsampled)

	legs := h.legs("prefill")
	legs = append(legs, h.legs("decode")...)
	if err := h.shutdown(); err != nil { // flushes the spans
		t.Fatal(err)
	}
	show := []string{"narwhal.engine", "narwhal.attempt", "http.response.status_code", "narwhal.attempts",
		"narwhal.disaggregation.decision", "narwhal.disaggregation.reason", "narwhal.fault.kind"}

	// A disaggregated success continues the client's trace, under its span.
	spans := recv.requestTrace(t, disagg.id)
	got := tree(spans, show...)
	want := `POST /v1/completions http.response.status_code=200 narwhal.attempts=1 narwhal.disaggregation.decision=disaggregated narwhal.disaggregation.reason=long_prompt
  attempt narwhal.attempt=1 narwhal.disaggregation.decision=disaggregated narwhal.disaggregation.reason=long_prompt
    prefill narwhal.engine=p0
    handoff narwhal.engine=p0
    decode narwhal.engine=d0 @first_token
`
	if got != want {
		t.Fatalf("disaggregated request, span tree:\n%s\nwant:\n%s", got, want)
	}
	root := spanNamed(t, spans, "POST /v1/completions")
	if root.trace != clientTrace || root.parent != clientSpan || root.kind != tracepb.Span_SPAN_KIND_SERVER || root.service != "narwhal-e2e" {
		t.Fatalf("the request span does not continue the client's trace: %+v", root)
	}
	if root.attrs["gen_ai.usage.output_tokens"] != "3" || root.attrs["gen_ai.usage.input_tokens"] == "0" || root.attrs["gen_ai.request.model"] != "sim-model" {
		t.Errorf("request span attributes: %v", root.attrs)
	}
	if d := spanNamed(t, spans, "decode"); d.attrs["gen_ai.usage.output_tokens"] != "3" || d.kind != tracepb.Span_SPAN_KIND_CLIENT {
		t.Errorf("decode span: %+v", d)
	}
	// Each engine leg received its own span's traceparent, the client's tracestate kept.
	for _, leg := range []string{"prefill", "decode"} {
		span := spanNamed(t, spans, leg)
		wantTP := "00-" + clientTrace + "-" + span.id + "-01"
		found := false
		for _, r := range legs {
			if r.Leg == leg && r.Get("traceparent") == wantTP {
				found = r.Get("tracestate") == "vendor=x"
			}
		}
		if !found {
			t.Errorf("no %s leg received traceparent %s with the client's tracestate", leg, wantTP)
		}
	}

	// A local decode: the decode alone.
	if got := tree(recv.requestTrace(t, local.id), show...); got != `POST /v1/chat/completions http.response.status_code=200 narwhal.attempts=1 narwhal.disaggregation.decision=local narwhal.disaggregation.reason=short_prompt
  attempt narwhal.attempt=1 narwhal.disaggregation.decision=local narwhal.disaggregation.reason=short_prompt
    decode narwhal.engine=d0 @first_token
` {
		t.Errorf("local decode, span tree:\n%s", got)
	}

	// A retried request: the failed attempt keeps its fault, the second one commits.
	if got := tree(recv.requestTrace(t, retried.id), show...); got != `POST /v1/completions http.response.status_code=200 narwhal.attempts=2 narwhal.disaggregation.decision=disaggregated narwhal.disaggregation.reason=long_prompt
  attempt narwhal.attempt=1 narwhal.disaggregation.decision=disaggregated narwhal.disaggregation.reason=long_prompt narwhal.fault.kind=engine_status ERROR
    prefill narwhal.engine=p0
    handoff narwhal.engine=p0
    decode narwhal.engine=d0 narwhal.fault.kind=engine_status ERROR
  attempt narwhal.attempt=2 narwhal.disaggregation.decision=disaggregated narwhal.disaggregation.reason=long_prompt
    prefill narwhal.engine=p0
    handoff narwhal.engine=p0
    decode narwhal.engine=d0 @first_token
` {
		t.Errorf("retried request, span tree:\n%s", got)
	}

	// A failure: each attempt's handoff refused, the request answered 502 with the fault kind.
	if got := tree(recv.requestTrace(t, failed.id), show...); got != `POST /v1/completions http.response.status_code=502 narwhal.attempts=2 narwhal.disaggregation.decision=disaggregated narwhal.disaggregation.reason=long_prompt narwhal.fault.kind=invalid_descriptor ERROR
  attempt narwhal.attempt=1 narwhal.disaggregation.decision=disaggregated narwhal.disaggregation.reason=long_prompt narwhal.fault.kind=invalid_descriptor ERROR
    prefill narwhal.engine=p0
    handoff narwhal.engine=p0 narwhal.fault.kind=invalid_descriptor ERROR
  attempt narwhal.attempt=2 narwhal.disaggregation.decision=disaggregated narwhal.disaggregation.reason=long_prompt narwhal.fault.kind=invalid_descriptor ERROR
    prefill narwhal.engine=p0
    handoff narwhal.engine=p0 narwhal.fault.kind=invalid_descriptor ERROR
` {
		t.Errorf("failed request, span tree:\n%s", got)
	}

	// A client's unsampled trace is not exported, but its engines still hear of it.
	if spans := recv.traces()[strings.Repeat("ab", 16)]; len(spans) != 0 {
		t.Errorf("an unsampled request was exported:\n%s", tree(spans, show...))
	}
	unsampledLegs := 0
	for _, r := range legs {
		if tp := r.Get("traceparent"); strings.HasPrefix(tp, "00-"+strings.Repeat("ab", 16)+"-") && strings.HasSuffix(tp, "-00") && !strings.Contains(tp, clientSpan) {
			unsampledLegs++
		}
	}
	if unsampledLegs != 2 {
		t.Errorf("%d legs of the unsampled request carried a child traceparent of its trace, want 2", unsampledLegs)
	}
	recv.mu.Lock()
	defer recv.mu.Unlock()
	for _, hv := range recv.headers {
		if hv != "e2e" {
			t.Errorf("an export without tracing.headers' x-scope-orgid: %q", hv)
		}
	}
	t.Logf("exports: %d, spans: %d; the disaggregated request's trace as exported:\n%s", recv.exports, len(recv.spans), got)
}

// OTLP/HTTP, and sampling: with tracing.sample_ratio 0 a request without a client trace is not
// traced, while a client's sampled trace is; a passthrough request is one leg.
func TestTracesOverOTLPHTTPFollowTheSampleRatio(t *testing.T) {
	recv, endpoint := startOTLPReceiver(t, config.TracingHTTP, "x-scope-orgid")
	h := start(t, setup{prefill: 1, decode: 1, engine: sim.Options{Tokens: 2}, config: tracing(config.TracingHTTP, endpoint, 0)})
	unsampled := h.send("/v1/completions", completion(longPrompt, true))
	expectDone(t, unsampled)
	const clientTrace = "0af7651916cd43dd8448eb211c80319c"
	sampled := h.send("/v1/embeddings", `{"model":"sim-model","input":"hello"}`, "traceparent", "00-"+clientTrace+"-b7ad6b7169203331-01")
	if sampled.status != 200 {
		t.Fatalf("embeddings: %d %s", sampled.status, sampled.body)
	}
	if err := h.shutdown(); err != nil {
		t.Fatal(err)
	}
	traces := recv.traces()
	if len(traces) != 1 || len(traces[clientTrace]) == 0 {
		t.Fatalf("want the client's sampled trace alone, got %d traces", len(traces))
	}
	if got := tree(traces[clientTrace], "narwhal.engine", "http.response.status_code"); got != `POST /v1/embeddings http.response.status_code=200
  attempt
    passthrough narwhal.engine=d0
` {
		t.Fatalf("passthrough request, span tree:\n%s", got)
	}
	if root := spanNamed(t, traces[clientTrace], "POST /v1/embeddings"); root.attrs["gen_ai.usage.input_tokens"] == "0" {
		t.Errorf("the embeddings' prompt tokens are not on the span: %v", root.attrs)
	}
}

func spanNamed(t *testing.T, spans []otlpSpan, name string) otlpSpan {
	t.Helper()
	for _, s := range spans {
		if s.name == name {
			return s
		}
	}
	t.Fatalf("no span %q in %s", name, tree(spans))
	return otlpSpan{}
}

// grpcHeader is the first value of the request metadata name.
func grpcHeader(ctx context.Context, name string) string {
	md, _ := metadata.FromIncomingContext(ctx)
	if v := md.Get(name); len(v) > 0 {
		return v[0]
	}
	return ""
}

// A connector that plans both legs up front: the handoff's checks come first, then the prefill
// and the decode run at once, each with a traceparent of its own; when the prefill fails, the
// decode it cancelled says so.
func TestTracesOfAConcurrentConnector(t *testing.T) {
	recv, endpoint := startOTLPReceiver(t, config.TracingGRPC, "")
	h := startWithConnector(t, 1, tracing(config.TracingGRPC, endpoint, 1))
	ok := h.send("/v1/completions", completion(longPrompt, true))
	expectDone(t, ok)
	failed := h.send("/v1/completions", completion("@sim:prefill.status=500 "+longPrompt, true))
	if failed.status != 502 {
		t.Fatalf("a failed prefill: %d %s", failed.status, failed.body)
	}
	legs := append(h.legs("prefill"), h.legs("decode")...)
	if err := h.shutdown(); err != nil {
		t.Fatal(err)
	}
	show := []string{"narwhal.engine", "narwhal.fault.kind"}
	spans := recv.requestTrace(t, ok.id)
	if got := tree(spans, show...); got != `POST /v1/completions
  attempt
    prefill narwhal.engine=p0
    handoff narwhal.engine=p0
    decode narwhal.engine=d0 @first_token
` {
		t.Fatalf("concurrent attempt, span tree:\n%s", got)
	}
	for _, leg := range []string{"prefill", "decode"} {
		tp := "00-" + spans[0].trace + "-" + spanNamed(t, spans, leg).id + "-01"
		found := false
		for _, r := range legs {
			found = found || (r.Leg == leg && r.Get("traceparent") == tp)
		}
		if !found {
			t.Errorf("the %s leg did not receive its span's traceparent %s", leg, tp)
		}
	}
	if got := tree(recv.requestTrace(t, failed.id), show...); got != `POST /v1/completions narwhal.fault.kind=engine_status ERROR
  attempt narwhal.fault.kind=engine_status ERROR
    prefill narwhal.engine=p0 narwhal.fault.kind=engine_status ERROR
    handoff narwhal.engine=p0
    decode narwhal.engine=d0 narwhal.fault.kind=aborted ERROR
` {
		t.Errorf("concurrent attempt whose prefill failed, span tree:\n%s", got)
	}
}
