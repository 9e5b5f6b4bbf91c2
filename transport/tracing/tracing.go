// Package tracing owns Narwhal's OpenTelemetry traces: the tracer provider with its sampler and
// OTLP exporter (tracing.* of the configuration), and the spans of one client request.
//
// A request's span tree is
//
//	POST /v1/chat/completions   (server; from arrival to the last byte; status, tokens)
//	└── attempt                 (one per attempt: engines, disaggregation decision and reason, fault)
//	    ├── prefill             (client; the producer's leg)
//	    ├── handoff             (the descriptor's checks before the decode)
//	    └── decode              (client; from its start to the end of the stream, first_token event)
//
// with a local decode's attempt holding its decode alone and a passthrough request's its one
// passthrough leg.
//
// Where the spans live: the request span belongs to ingress, not to the request supervisor.
// Ingress holds the client's connection from arrival to the last byte, reads the client's
// traceparent, runs every attempt's legs on the request's own goroutine and relays the stream,
// so every moment a span starts or ends is a moment ingress already acts on, with no message
// to any actor; the supervisor's decisions reach the spans as the plain values it already hands
// ingress (the attempt's engines, decision and reason). The step spans come from the attempt
// runner's Observer hook (transport.Observer), the one place that knows when each step starts
// and ends, so the engine client carries no tracing code: Run only asks the observer which
// traceparent each leg's engine request carries.
//
// Off (tracing.otlp_endpoint empty) the Tracer is nil, every method of a nil *Tracer or
// *Request does nothing, and ingress hands the attempt runner no observer: a request costs
// nothing for tracing.
package tracing

import (
	"context"
	"errors"
	"fmt"
	"net/url"
	"time"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/exporters/otlp/otlptrace"
	"go.opentelemetry.io/otel/exporters/otlp/otlptrace/otlptracegrpc"
	"go.opentelemetry.io/otel/exporters/otlp/otlptrace/otlptracehttp"
	"go.opentelemetry.io/otel/propagation"
	"go.opentelemetry.io/otel/sdk/resource"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/trace"

	"github.com/narwhal-router/narwhal/buildinfo"
	"github.com/narwhal-router/narwhal/config"
	"github.com/narwhal-router/narwhal/transport"
	"github.com/narwhal-router/narwhal/transport/fault"
	"github.com/narwhal-router/narwhal/transport/wire"
)

// The bounds of the span pipeline (docs/configuration.md, "tracing"): spans waiting for export,
// spans per export, how long a batch waits to fill, how long one export may take, and how long
// Shutdown flushes.
const (
	maxQueuedSpans = 2048
	maxBatchSpans  = 512
	batchTimeout   = 5 * time.Second
	exportTimeout  = 10 * time.Second
	// ShutdownTimeout bounds the flush of queued spans at shutdown.
	ShutdownTimeout = 5 * time.Second
)

// instrumentationName names the tracer (the instrumentation scope of every span).
const instrumentationName = "github.com/narwhal-router/narwhal"

// Tracer makes the spans of client requests and exports them. A nil *Tracer is tracing off.
type Tracer struct {
	provider *sdktrace.TracerProvider
	tracer   trace.Tracer
}

// New builds the tracer tracing.* (validated) asks for, or returns nil when tracing is off
// (tracing.otlp_endpoint empty). The exporter connects lazily: a collector that is down delays
// no start-up and fails no request.
func New(cfg config.Tracing) (*Tracer, error) {
	if cfg.OTLPEndpoint == "" {
		return nil, nil
	}
	exp, err := newExporter(cfg)
	if err != nil {
		return nil, fmt.Errorf("tracing: %w", err)
	}
	return newTracer(cfg, sdktrace.NewBatchSpanProcessor(exp,
		sdktrace.WithMaxQueueSize(maxQueuedSpans), sdktrace.WithMaxExportBatchSize(maxBatchSpans),
		sdktrace.WithBatchTimeout(batchTimeout), sdktrace.WithExportTimeout(exportTimeout))), nil
}

// collector is where tracing.* sends spans: the otlp_endpoint URL read once.
type collector struct {
	// endpoint is the collector's host:port; insecure says plaintext (an http:// endpoint);
	// path is the OTLP/HTTP path (/v1/traces unless the endpoint names one).
	endpoint string
	insecure bool
	path     string
	headers  map[string]string
}

// collectorOf reads the collector of cfg (validated: the URL parses, with a host and a port).
func collectorOf(cfg config.Tracing) (collector, error) {
	u, err := url.Parse(cfg.OTLPEndpoint)
	if err != nil {
		return collector{}, fmt.Errorf("otlp_endpoint %q: %w", cfg.OTLPEndpoint, err)
	}
	c := collector{endpoint: u.Host, insecure: u.Scheme == "http", headers: map[string]string{}}
	if cfg.Protocol == config.TracingHTTP {
		c.path = "/v1/traces"
		if u.Path != "" && u.Path != "/" {
			c.path = u.Path
		}
	}
	for _, h := range cfg.Headers {
		c.headers[h.Name] = h.Value
	}
	return c, nil
}

func newExporter(cfg config.Tracing) (*otlptrace.Exporter, error) {
	c, err := collectorOf(cfg)
	if err != nil {
		return nil, err
	}
	ctx := context.Background() // New connects nothing yet: the context bounds no I/O
	switch cfg.Protocol {
	case config.TracingGRPC:
		opts := []otlptracegrpc.Option{otlptracegrpc.WithEndpoint(c.endpoint), otlptracegrpc.WithHeaders(c.headers),
			otlptracegrpc.WithTimeout(exportTimeout)}
		if c.insecure {
			opts = append(opts, otlptracegrpc.WithInsecure())
		}
		return otlptracegrpc.New(ctx, opts...)
	case config.TracingHTTP:
		opts := []otlptracehttp.Option{otlptracehttp.WithEndpoint(c.endpoint), otlptracehttp.WithURLPath(c.path),
			otlptracehttp.WithHeaders(c.headers), otlptracehttp.WithTimeout(exportTimeout)}
		if c.insecure {
			opts = append(opts, otlptracehttp.WithInsecure())
		}
		return otlptracehttp.New(ctx, opts...)
	}
	return nil, fmt.Errorf("protocol %q: want %s or %s", cfg.Protocol, config.TracingGRPC, config.TracingHTTP)
}

// newTracer builds the provider around processor: parent-based sampling at the configured
// ratio, and the resource naming the service and its build.
func newTracer(cfg config.Tracing, processor sdktrace.SpanProcessor) *Tracer {
	b := buildinfo.Get()
	res := resource.NewSchemaless(attribute.String("service.name", cfg.ServiceName),
		attribute.String("service.version", b.Version), attribute.String("narwhal.revision", b.Revision))
	provider := sdktrace.NewTracerProvider(
		sdktrace.WithSampler(sdktrace.ParentBased(sdktrace.TraceIDRatioBased(cfg.SampleRatio))),
		sdktrace.WithResource(res),
		sdktrace.WithSpanProcessor(processor),
	)
	return &Tracer{provider: provider, tracer: provider.Tracer(instrumentationName, trace.WithInstrumentationVersion(b.Version))}
}

// Shutdown exports what is queued, within ctx, and stops the exporter.
func (t *Tracer) Shutdown(ctx context.Context) error {
	if t == nil {
		return nil
	}
	return t.provider.Shutdown(ctx)
}

// Request is the trace of one client request: its span, and the spans of the attempt that runs.
// A nil *Request (tracing off) does nothing. Ingress calls it in the order of the request's
// life, from the request's goroutines one at a time; only a concurrent connector's prefill
// step runs beside the rest of its attempt, and it touches its own span only.
type Request struct {
	ctx     context.Context // carries the request span, the attempts' parent
	span    trace.Span
	tracer  trace.Tracer
	attempt *attempt // the attempt running, or the committed one
	last    *fault.Fault
	n       int
	ended   bool
}

// attempt is one attempt's span and its steps' spans.
type attempt struct {
	ctx   context.Context
	span  trace.Span
	steps [transport.StepCount]trace.Span
}

var traceContext propagation.TraceContext

// StartRequest starts the span of a request to endpoint that arrived at arrival, continuing the
// client's W3C trace context (traceparent and tracestate as the client sent them; an invalid
// one starts a new trace, as the specification asks).
func (t *Tracer) StartRequest(endpoint wire.Endpoint, requestID, model, traceParent, traceState string, arrival time.Time) *Request {
	if t == nil {
		return nil
	}
	ctx := context.Background()
	if traceParent != "" {
		ctx = traceContext.Extract(ctx, propagation.MapCarrier{"traceparent": traceParent, "tracestate": traceState})
	}
	path := endpoint.ClientPath()
	ctx, span := t.tracer.Start(ctx, "POST "+path, trace.WithSpanKind(trace.SpanKindServer), trace.WithTimestamp(arrival),
		trace.WithAttributes(attribute.String("http.request.method", "POST"), attribute.String("http.route", path),
			attribute.String("url.path", path), attribute.String("narwhal.endpoint", endpoint.String()),
			attribute.String("narwhal.request_id", requestID), attribute.String("gen_ai.request.model", model)))
	return &Request{ctx: ctx, span: span, tracer: t.tracer}
}

// TraceParent is the request span's W3C traceparent ("" when tracing is off).
func (r *Request) TraceParent() string {
	if r == nil {
		return ""
	}
	return traceParent(r.span.SpanContext())
}

// Plan is what the request supervisor decided for an attempt, as its span records it.
type Plan struct {
	N                  int
	BackendRequestID   string
	Producer, Consumer string // Producer "": no prefill leg
	Decision, Reason   string // "" for a passthrough request
}

// StartAttempt starts the span of an attempt about to run p.
func (r *Request) StartAttempt(p Plan) {
	if r == nil {
		return
	}
	attrs := []attribute.KeyValue{attribute.Int("narwhal.attempt", p.N), attribute.String("narwhal.backend_request_id", p.BackendRequestID),
		attribute.String("narwhal.consumer", p.Consumer)}
	if p.Producer != "" {
		attrs = append(attrs, attribute.String("narwhal.producer", p.Producer))
	}
	if p.Decision != "" {
		attrs = append(attrs, attribute.String("narwhal.disaggregation.decision", p.Decision),
			attribute.String("narwhal.disaggregation.reason", p.Reason))
		if r.n == 0 { // the request's decision is its first attempt's (as the metric counts it)
			r.span.SetAttributes(attrs[len(attrs)-2:]...)
		}
	}
	r.n = p.N
	ctx, span := r.tracer.Start(r.ctx, "attempt", trace.WithAttributes(attrs...))
	r.attempt = &attempt{ctx: ctx, span: span}
}

// StepStarted implements transport.Observer: the step's span, whose traceparent the step's
// engine request carries.
func (r *Request) StepStarted(step transport.Step, engine string) string {
	a := r.attempt
	if a == nil {
		return ""
	}
	kind := trace.SpanKindClient // a leg is a call to an engine
	if step == transport.StepHandoff {
		kind = trace.SpanKindInternal
	}
	_, span := r.tracer.Start(a.ctx, step.String(), trace.WithSpanKind(kind), trace.WithAttributes(attribute.String("narwhal.engine", engine)))
	a.steps[step] = span
	return traceParent(span.SpanContext())
}

// StepEnded implements transport.Observer. A decode that committed stays open, with an event
// at its first token, until the stream ends (End).
func (r *Request) StepEnded(step transport.Step, f *fault.Fault) {
	a := r.attempt
	if a == nil || a.steps[step] == nil {
		return
	}
	span := a.steps[step]
	if f == nil && step == transport.StepDecode {
		span.AddEvent("first_token")
		return
	}
	setFault(span, f)
	span.End()
	a.steps[step] = nil
}

// AttemptEnded records how the attempt ended: a committed one stays open until the stream
// ends; a failed one ends here with its fault.
func (r *Request) AttemptEnded(o *transport.Outcome) {
	if r == nil || r.attempt == nil {
		return
	}
	a := r.attempt
	if o.MissingDescriptor {
		a.span.SetAttributes(attribute.Bool("narwhal.handoff.missing_descriptor", true))
	}
	if !o.DecodeStarted.IsZero() && o.HandoffAge > 0 {
		a.span.SetAttributes(attribute.Float64("narwhal.handoff.age_s", o.HandoffAge.Seconds()))
	}
	if o.Committed() {
		return
	}
	r.last = o.Fault
	setFault(a.span, o.Fault)
	a.end()
	r.attempt = nil
}

// Finish is how a request ended, for its span.
type Finish struct {
	// Status is the HTTP status the client got; 0 when it hung up before any.
	Status int
	// Fault is what ended a committed response early (nil: it completed, or it never
	// committed, when the last attempt's fault stands).
	Fault *fault.Fault
	// ClientGone says the client stopped reading.
	ClientGone bool
	// Token counts from the engine's usage (cached as the client was told); 0 when unknown.
	PromptTokens, OutputTokens, CachedTokens int
}

// End ends the request's spans: the committed attempt's decode and the attempt, then the
// request span. Calls after the first do nothing.
func (r *Request) End(f Finish) {
	if r == nil || r.ended {
		return
	}
	r.ended = true
	fl := f.Fault
	if a := r.attempt; a != nil { // the committed attempt
		if d := a.steps[transport.StepDecode]; d != nil {
			d.SetAttributes(attribute.Int("gen_ai.usage.output_tokens", f.OutputTokens))
			setFault(d, fl)
		}
		setFault(a.span, fl)
		a.end()
	}
	if fl == nil && f.Status != 200 {
		fl = r.last // answered with the last attempt's failure
	}
	attrs := []attribute.KeyValue{attribute.Int("narwhal.attempts", r.n),
		attribute.Int("gen_ai.usage.input_tokens", f.PromptTokens), attribute.Int("gen_ai.usage.output_tokens", f.OutputTokens),
		attribute.Int("narwhal.usage.cached_tokens", f.CachedTokens)}
	if f.Status > 0 {
		attrs = append(attrs, attribute.Int("http.response.status_code", f.Status))
	}
	if f.ClientGone {
		attrs = append(attrs, attribute.Bool("narwhal.client_gone", true))
	}
	r.span.SetAttributes(attrs...)
	switch {
	case fl != nil && !f.ClientGone:
		setFault(r.span, fl)
	case f.Status >= 500:
		r.span.SetStatus(codes.Error, fmt.Sprintf("answered %d", f.Status))
	}
	r.span.End()
}

// end ends the attempt's span and any step span still open (a step the attempt never ended:
// the decode of a stream, a prefill cancelled with its request).
func (a *attempt) end() {
	for i, s := range a.steps {
		if s != nil {
			s.End()
			a.steps[i] = nil
		}
	}
	a.span.End()
}

// setFault marks span failed with f's kind (nothing for nil).
func setFault(span trace.Span, f *fault.Fault) {
	if f == nil {
		return
	}
	span.SetAttributes(attribute.String("narwhal.fault.kind", f.Kind.String()), attribute.String("narwhal.fault.engine", f.Engine))
	if f.Reason != "" {
		span.SetAttributes(attribute.String("narwhal.fault.reason", f.Reason))
	}
	var err error = f
	if errors.Is(f.Err, fault.ErrClientGone) {
		err = fault.ErrClientGone
	}
	span.SetStatus(codes.Error, err.Error())
}

// traceParent renders sc as a W3C traceparent header (version 00).
func traceParent(sc trace.SpanContext) string {
	if !sc.IsValid() {
		return ""
	}
	return "00-" + sc.TraceID().String() + "-" + sc.SpanID().String() + "-" + sc.TraceFlags().String()
}
