package tracing

import (
	"context"
	"maps"
	"testing"
	"time"

	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"
	"go.opentelemetry.io/otel/trace"

	"github.com/narwhal-router/narwhal/bench/sim"
	"github.com/narwhal-router/narwhal/config"
	"github.com/narwhal-router/narwhal/transport"
	"github.com/narwhal-router/narwhal/transport/fault"
	"github.com/narwhal-router/narwhal/transport/kv"
	"github.com/narwhal-router/narwhal/transport/wire"
)

// Tracing off is a nil Tracer: it starts nothing, and every call ingress makes on the nil
// Request it gets allocates nothing.
func TestOffCostsNothing(t *testing.T) {
	var off *Tracer
	arrival := time.Now()
	var out transport.Outcome
	allocs := testing.AllocsPerRun(100, func() {
		r := off.StartRequest(wire.EndpointChat, "id", "m", "", "", arrival)
		r.StartAttempt(Plan{N: 1, Consumer: "d0"})
		r.AttemptEnded(&out)
		r.End(Finish{Status: 200})
		if r != nil || r.TraceParent() != "" {
			t.Fatal("a nil Tracer made a request trace")
		}
	})
	if allocs != 0 {
		t.Fatalf("tracing off allocates %.0f times per request", allocs)
	}
	if err := off.Shutdown(context.Background()); err != nil {
		t.Fatal(err)
	}
	if tr, err := New(config.Default().Tracing); tr != nil || err != nil {
		t.Fatalf("New without an endpoint: %v, %v", tr, err)
	}
}

// inMemory is a Tracer whose spans end up in an in-memory exporter, as the SDK recorded them.
func inMemory(t *testing.T, ratio float64) (*Tracer, *tracetest.InMemoryExporter) {
	exp := tracetest.NewInMemoryExporter()
	tr := newTracer(config.Tracing{SampleRatio: ratio, ServiceName: "narwhal-test"}, sdktrace.NewSimpleSpanProcessor(exp))
	t.Cleanup(func() { tr.Shutdown(context.Background()) })
	return tr, exp
}

// observed is what ingress hands the attempt runner for a traced request: a Progress that is
// also the trace's Observer.
type observed struct{ *Request }

func (observed) Leg(fault.Phase, time.Time) {}

// An attempt run through transport.Run against simulated engines gives the request span, the
// attempt span and its three steps, each a child of the one above, starting at the request's
// arrival; each engine leg carries its own span's traceparent; End ends everything once.
func TestTheSpanTreeOfADisaggregatedAttempt(t *testing.T) {
	fleet, err := sim.StartFleet(sim.FleetOptions{Prefill: 1, Decode: 1, Engine: sim.Options{Tokens: 2}})
	if err != nil {
		t.Fatal(err)
	}
	defer fleet.Close()
	cfg := config.Default()
	for _, e := range fleet.Engines {
		cfg.Engines = append(cfg.Engines, config.Engine{Name: e.Name(), URL: e.URL(), Role: config.Role(e.Role()),
			KV: config.KV{EngineID: e.EngineID(), Endpoint: e.KVEndpoint()}})
	}
	engines, err := transport.NewProvisioner(kv.Builtin(), cfg.ReservedPorts()).Engines(cfg.Engines, "test")
	if err != nil {
		t.Fatal(err)
	}
	producer := transport.NewEngineClient(engines[0], cfg.Engine, cfg.Server.MaxResponseBytes)
	consumer := transport.NewEngineClient(engines[1], cfg.Engine, cfg.Server.MaxResponseBytes)
	defer producer.Close()
	defer consumer.Close()

	tr, exp := inMemory(t, 1)
	arrival := time.Now().Add(-time.Millisecond)
	r := tr.StartRequest(wire.EndpointCompletions, "req-1", "sim-model", "", "", arrival)
	r.StartAttempt(Plan{N: 1, BackendRequestID: "b-1", Producer: "p0", Consumer: "d0", Decision: "disaggregated", Reason: "long_prompt"})
	body, err := wire.ParseClientBody(wire.EndpointCompletions, []byte(`{"model":"sim-model","prompt":"Hello there","stream":true}`))
	if err != nil {
		t.Fatal(err)
	}
	out := transport.Run(context.Background(), &transport.Plan{Producer: producer, Consumer: consumer},
		&transport.Request{Body: body, BackendRequestID: "b-1", Deadline: time.Now().Add(10 * time.Second)}, observed{r})
	if !out.Committed() {
		t.Fatalf("attempt failed: %v", out.Fault)
	}
	out.Stream.Close()
	r.AttemptEnded(&out)
	if n := len(exp.GetSpans()); n != 2 {
		t.Fatalf("%d spans ended before the stream did, want 2 (prefill and handoff: the decode and its attempt stay open)", n)
	}
	r.End(Finish{Status: 200, PromptTokens: 2, OutputTokens: 2})
	r.End(Finish{Status: 500}) // ignored
	spans := exp.GetSpans()
	byName := map[string]tracetest.SpanStub{}
	for _, s := range spans {
		byName[s.Name] = s
	}
	if len(spans) != 5 || len(byName) != 5 {
		t.Fatalf("%d spans: %v", len(spans), byName)
	}
	root, att := byName["POST /v1/completions"], byName["attempt"]
	if root.Parent.IsValid() || !root.StartTime.Equal(arrival) || root.SpanKind != trace.SpanKindServer {
		t.Fatalf("request span: parent %v, start %v (arrival %v), kind %v", root.Parent, root.StartTime, arrival, root.SpanKind)
	}
	if att.Parent.SpanID() != root.SpanContext.SpanID() {
		t.Fatal("the attempt is not the request's child")
	}
	for _, step := range []string{"prefill", "handoff", "decode"} {
		s, ok := byName[step]
		if !ok || s.Parent.SpanID() != att.SpanContext.SpanID() || s.SpanContext.TraceID() != root.SpanContext.TraceID() {
			t.Fatalf("%s is not the attempt's child: %+v", step, s)
		}
	}
	if ev := byName["decode"].Events; len(ev) != 1 || ev[0].Name != "first_token" {
		t.Fatalf("decode events %v", ev)
	}
	for _, kv := range root.Attributes {
		if kv.Key == "http.response.status_code" && kv.Value.AsInt64() != 200 {
			t.Fatalf("End's second call changed the status: %v", kv.Value.AsInt64())
		}
	}
	for leg, engine := range map[string]*sim.Engine{"prefill": fleet.Engine("p0"), "decode": fleet.Engine("d0")} {
		want := traceParent(byName[leg].SpanContext)
		var got string
		for _, rec := range engine.Requests() {
			if rec.Leg == leg {
				got = rec.Get("traceparent")
			}
		}
		if got != want {
			t.Errorf("the %s leg carried traceparent %q, want its span's %q", leg, got, want)
		}
	}
}

// Sampling: with sample_ratio 0 a request without a parent records nothing but still has a
// valid, unsampled trace context to hand its engines; a client's sampled parent is followed.
func TestSamplingFollowsTheRatioAndTheParent(t *testing.T) {
	tr, exp := inMemory(t, 0)
	r := tr.StartRequest(wire.EndpointChat, "a", "m", "", "", time.Now())
	if tp := r.TraceParent(); len(tp) != 55 || tp[53:] != "00" {
		t.Fatalf("an unsampled request's traceparent %q", tp)
	}
	r.End(Finish{Status: 200})
	const parent = "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01"
	s := tr.StartRequest(wire.EndpointChat, "b", "m", parent, "", time.Now())
	if tp := s.TraceParent(); tp[:36] != parent[:36] || tp[53:] != "01" {
		t.Fatalf("a sampled child's traceparent %q of %q", tp, parent)
	}
	s.End(Finish{Status: 200})
	if spans := exp.GetSpans(); len(spans) != 1 || spans[0].SpanContext.TraceID().String() != "0af7651916cd43dd8448eb211c80319c" {
		t.Fatalf("exported %d spans, want the sampled parent's request alone", len(spans))
	}
}

// The collector is read from tracing.otlp_endpoint once: its host:port, plaintext for http://,
// the OTLP/HTTP path (/v1/traces unless the URL names one; none for gRPC), the headers.
func TestCollectorOfTheEndpoint(t *testing.T) {
	for _, tc := range []struct {
		cfg  config.Tracing
		want collector
	}{
		{config.Tracing{OTLPEndpoint: "http://127.0.0.1:4317", Protocol: config.TracingGRPC},
			collector{endpoint: "127.0.0.1:4317", insecure: true}},
		{config.Tracing{OTLPEndpoint: "https://otel.example:4318", Protocol: config.TracingHTTP},
			collector{endpoint: "otel.example:4318", path: "/v1/traces"}},
		{config.Tracing{OTLPEndpoint: "http://c:4318/otlp/v1/traces", Protocol: config.TracingHTTP, Headers: []config.TracingHeader{{Name: "x-scope-orgid", Value: "t1"}}},
			collector{endpoint: "c:4318", insecure: true, path: "/otlp/v1/traces", headers: map[string]string{"x-scope-orgid": "t1"}}},
	} {
		got, err := collectorOf(tc.cfg)
		if tc.want.headers == nil {
			tc.want.headers = map[string]string{}
		}
		if err != nil || got.endpoint != tc.want.endpoint || got.insecure != tc.want.insecure || got.path != tc.want.path ||
			!maps.Equal(got.headers, tc.want.headers) {
			t.Errorf("%+v: %+v, %v; want %+v", tc.cfg, got, err, tc.want)
		}
	}
}
