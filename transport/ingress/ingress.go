package ingress

import (
	"context"
	"errors"
	"log/slog"
	"net"
	"strconv"
	"strings"
	"sync/atomic"
	"time"

	"github.com/valyala/fasthttp"

	"github.com/narwhal-router/narwhal/config"
	"github.com/narwhal-router/narwhal/transport/fault"
	"github.com/narwhal-router/narwhal/transport/memory"
	"github.com/narwhal-router/narwhal/transport/telemetry"
	"github.com/narwhal-router/narwhal/transport/tracing"
	"github.com/narwhal-router/narwhal/transport/wire"
)

// ModelLister reports the models the fleet serves, for GET /v1/models: Models their ids,
// Parent a LoRA adapter's base model ("" for a base model).
type ModelLister interface {
	Models() []string
	Parent(model string) string
}

// Ingress is the client-facing OpenAI API listener. It parses and validates requests, hands
// each to a request supervisor through the Dispatcher, and carries out the supervisor's verdict:
// an error response, or the relay of a committed decode stream.
type Ingress struct {
	rt         config.Server // what the listener was built with; the settings below may change
	dispatcher Dispatcher
	models     ModelLister
	metrics    *telemetry.Metrics
	tracer     *tracing.Tracer // nil: tracing off
	gone       *goneWatcher
	srv        *fasthttp.Server
	budget     *memory.Budget
	live       atomic.Pointer[liveSettings]
	rejections RejectionLog              // nil: requests ingress answers itself are not logged
	counter    TokenCounter              // nil: count_tokens answers 501
	flows      atomic.Pointer[flowTable] // flow_control (tenant.go); nil: every request one flow
}

// Options are an Ingress's collaborators beyond the router.
type Options struct {
	// Logger receives the client connections' errors (connlog.go); nil: discarded.
	Logger *slog.Logger
	// Budget is the process's memory budget (server.max_buffered_bytes); nil bounds nothing.
	Budget *memory.Budget
	// Tracer traces every request the listener admits; nil: tracing off.
	Tracer *tracing.Tracer
	// Counter counts prompts' tokens for the Messages API's count_tokens; nil: that endpoint
	// answers 501.
	Counter TokenCounter
	// Rejections hears of every request ingress answers itself, before any supervisor (a
	// missing key, a malformed body, a bad header): the access log's line for it. nil: none.
	Rejections RejectionLog
}

// liveSettings are the listener's settings a reload may change (Reconfigure), as one value: a
// request reads it once, when it arrives, and keeps it to its end.
type liveSettings struct {
	deadline      time.Duration // request.deadline_s
	exposeRouting bool          // server.expose_routing_headers
	exposeErrors  bool          // server.expose_engine_errors
	keys          *keyring      // server.api_keys, api_keys_file, api_key_max_concurrency
}

// NewIngress builds the listener from the server and request sections and the client API keys
// (server.api_keys and api_keys_file's, read once by the caller); Serve starts it.
func NewIngress(srv config.Server, keys []string, req config.Request, d Dispatcher, models ModelLister, m *telemetry.Metrics, opts Options) (*Ingress, error) {
	if opts.Logger == nil {
		opts.Logger = slog.New(slog.DiscardHandler)
	}
	dispatcher := keyedDispatcher{d}
	gone, err := newGoneWatcher(dispatcher.ClientGone)
	if err != nil {
		return nil, err
	}
	in := &Ingress{rt: srv, dispatcher: dispatcher, models: models, metrics: m, tracer: opts.Tracer, gone: gone, budget: opts.Budget,
		rejections: opts.Rejections, counter: opts.Counter}
	in.Reconfigure(srv, keys, req)
	in.srv = &fasthttp.Server{
		Name:               "narwhal",
		Handler:            refuseLoops(in.handle),
		ErrorHandler:       in.handleTransportError,
		Logger:             &connLog{log: opts.Logger.With("component", "ingress")},
		MaxRequestBodySize: srv.MaxBodyBytes,
		// Bodies are read by the handler (body.go), after the memory budget has room for them.
		StreamRequestBody: true,
		ReadTimeout:       srv.HeaderTimeoutS.Duration(),
		IdleTimeout:       srv.IdleTimeoutS.Duration(),
		// The read buffer bounds the request line and headers (431 past it). ReduceMemoryUsage
		// hands it back to the pool once a request is read, so a streaming response (and an idle
		// keep-alive connection) holds none: a larger header allowance costs no per-stream memory.
		ReadBufferSize:    srv.MaxHeaderBytes,
		ReduceMemoryUsage: true,
		// Bounds writing each non-streamed response; the relay bounds each write of a stream.
		WriteTimeout:    srv.ClientWriteTimeoutS.Duration(),
		CloseOnShutdown: true,
		// A streaming response holds its connection's write buffer for as long as it streams,
		// so its size is a per-stream cost (bench: streams). The response head and the first
		// events (a few hundred bytes each) fit in 1 KiB; a batch larger than the buffer leaves
		// in one or two more writes, which measured no CPU difference at 300 req/s.
		WriteBufferSize:       1024,
		NoDefaultServerHeader: true,
		NoDefaultDate:         true,
	}
	return in, nil
}

// Reconfigure applies a reload's run-time settings: the request deadline, the routing and
// engine-error exposure, and the client API keys (with their concurrency bound; a key kept
// across the reload keeps counting its requests in flight). Requests that arrive from now on
// use them; one in flight keeps what it arrived with. The rest of srv is what the listener was
// built with and is not read again.
func (in *Ingress) Reconfigure(srv config.Server, keys []string, req config.Request) {
	var prev *keyring
	if cur := in.live.Load(); cur != nil {
		prev = cur.keys
	}
	in.live.Store(&liveSettings{deadline: req.DeadlineS.Duration(), exposeRouting: srv.ExposeRoutingHeaders,
		exposeErrors: srv.ExposeEngineErrors, keys: newKeyring(keys, srv.APIKeyMaxConcurrency, prev)})
}

// Serve accepts connections on ln until Shutdown.
func (in *Ingress) Serve(ln net.Listener) error { return in.srv.Serve(lingerListener{ln}) }

// Shutdown stops accepting and waits, until ctx ends, for in-flight requests to finish.
func (in *Ingress) Shutdown(ctx context.Context) error { return in.srv.ShutdownWithContext(ctx) }

// Close releases the disconnect watcher; call it after Shutdown.
func (in *Ingress) Close() { in.gone.close() }

func (in *Ingress) handle(ctx *fasthttp.RequestCtx) {
	path := ctx.Path()
	if string(path) == "/health" { // no key needed: load balancers and probes call it
		if !ctx.IsGet() && !ctx.IsHead() {
			methodNotAllowed(ctx, "GET")
			return
		}
		ctx.SetStatusCode(fasthttp.StatusOK)
		return
	}
	if messagesPath(path) {
		defer messagesAnswer(ctx)
	}
	live := in.live.Load()
	arrival := time.Now()
	slot, ok := live.keys.admit(ctx)
	if !ok {
		name := "other"
		if ep, known := wire.EndpointForPath(path); known {
			name = ep.String()
		} else if messagesPath(path) { // count_tokens
			name = wire.EndpointMessages.String()
		}
		in.metrics.Rejected(name, ctx.Response.StatusCode(), 0)
		ctx.Response.Header.Set("x-request-id", clientRequestID(ctx.Request.Header.Peek("X-Request-Id")))
		in.logRejected(ctx, name, arrival, "unauthorized")
		return
	}
	switch string(path) {
	case "/v1/completions":
		in.generate(ctx, live, wire.EndpointCompletions, slot)
		return
	case "/v1/chat/completions":
		in.generate(ctx, live, wire.EndpointChat, slot)
		return
	case "/v1/responses":
		in.generate(ctx, live, wire.EndpointResponses, slot)
		return
	case "/v1/messages":
		in.generate(ctx, live, wire.EndpointMessages, slot)
		return
	case countTokensPath:
		in.countTokens(ctx, live)
	case "/v1/models":
		in.listModels(ctx)
	default:
		if ep, ok := wire.EndpointForPath(path); ok && ep.Passthrough() {
			in.generate(ctx, live, ep, slot)
			return
		}
		if id, ok := strings.CutPrefix(string(path), "/v1/models/"); ok {
			in.retrieveModel(ctx, id)
			break
		}
		writeError(ctx, fasthttp.StatusNotFound, fault.ErrorBody{Message: "no route for " + string(path), Type: "invalid_request_error", Code: "not_found"})
	}
	live.keys.release(slot)
}

// handleTransportError answers a request fasthttp could not read. The connection is closed after
// the answer, lingering so that a client still sending reads it (linger.go).
func (in *Ingress) handleTransportError(ctx *fasthttp.RequestCtx, err error) {
	lingerOnClose(ctx)
	if messagesPath(ctx.Path()) {
		defer messagesAnswer(ctx)
	}
	var small *fasthttp.ErrSmallBuffer
	var ne net.Error
	switch {
	case errors.Is(err, fasthttp.ErrBodyTooLarge):
		writeError(ctx, fasthttp.StatusRequestEntityTooLarge, fault.ErrorBody{
			Message: "request body is larger than server.max_body_bytes (" + strconv.Itoa(in.rt.MaxBodyBytes) + " bytes)",
			Type:    fault.ErrorType(413), Code: "request_too_large"})
	case errors.As(err, &small):
		writeError(ctx, fasthttp.StatusRequestHeaderFieldsTooLarge, fault.ErrorBody{
			Message: "request line and headers are larger than server.max_header_bytes (" + strconv.Itoa(in.rt.MaxHeaderBytes) + " bytes)",
			Type:    fault.ErrorType(431), Code: "headers_too_large"})
	case errors.As(err, &ne) && ne.Timeout():
		writeError(ctx, fasthttp.StatusRequestTimeout, fault.ErrorBody{
			Message: "the request was not received within server.header_timeout_s",
			Type:    fault.ErrorType(408), Code: "request_timeout"})
	default:
		writeError(ctx, fasthttp.StatusBadRequest, fault.ErrorBody{Message: "malformed HTTP request", Type: fault.ErrorType(400), Code: "bad_request"})
	}
}

func (in *Ingress) generate(ctx *fasthttp.RequestCtx, live *liveSettings, ep wire.Endpoint, slot int) {
	arrival := time.Now()
	if !ctx.IsPost() {
		live.keys.release(slot)
		methodNotAllowed(ctx, "POST")
		return
	}
	id := clientRequestID(ctx.Request.Header.Peek("X-Request-Id"))
	ctx.Response.Header.Set("x-request-id", id)

	deadline, err := requestDeadline(live.deadline, arrival, ctx.Request.Header.Peek("X-Narwhal-Deadline-S"))
	if err != nil {
		live.keys.release(slot)
		in.reject(ctx, live, ep, arrival, fasthttp.StatusBadRequest, fault.ErrorBody{Message: err.Error(), Type: fault.ErrorType(400), Code: "invalid_deadline"})
		return
	}
	flow, bad := in.flows.Load().classify(ctx, live.keys, slot)
	if bad != nil {
		live.keys.release(slot)
		in.reject(ctx, live, ep, arrival, fasthttp.StatusBadRequest, *bad)
		return
	}
	raw, hold, ok := in.readBody(ctx, live, ep, arrival)
	if !ok {
		live.keys.release(slot)
		return
	}
	body, err := in.parseBody(ep, raw)
	if err != nil {
		hold.Free()
		live.keys.release(slot)
		in.rejectBadBody(ctx, live, ep, arrival, err)
		return
	}

	x := NewExchange(id, body, arrival, deadline)
	x.Flow = flow
	x.budget = in.budget
	x.live = live
	x.keys = live.keys
	x.keySlot.Store(int32(slot))
	x.TraceParent = string(ctx.Request.Header.Peek("traceparent"))
	x.TraceState = string(ctx.Request.Header.Peek("tracestate"))
	x.trace = in.tracer.StartRequest(ep, id, body.Model, x.TraceParent, x.TraceState, arrival)
	in.dispatcher.Dispatch(x)
	watch := in.gone.watch(ctx.Conn(), x)

	// The supervisor decides, this goroutine carries out: each attempt it plans runs here, and
	// it answers once no attempt will commit.
	for {
		cmd := x.Await()
		a := cmd.Attempt
		if a == nil {
			hold.Free()
			watch.stop()
			in.answer(ctx, live, cmd.Answer)
			x.endTrace(cmd.Answer.Status, nil)
			x.releaseKey()
			return
		}
		out := x.Run(a)
		if out.Fault != nil && errors.Is(out.Fault.Err, memory.ErrNoRoom) {
			in.metrics.BufferRefused("answer")
		}
		in.dispatcher.AttemptEnded(x, a.Report(&out))
		if !out.Committed() {
			continue
		}
		// Committed: the first token (or the answer) is in and the status is 200 from here on.
		routing := Routing{Consumer: a.Plan.Consumer.Name(), Attempts: a.N}
		if a.Plan.Producer != nil {
			routing.Producer = a.Plan.Producer.Name()
		}
		in.setCommonHeaders(ctx, live, timing(arrival, &out), routing)
		// The client's body is not read again (no retry after commit): hand its buffer back
		// instead of keeping it for the whole stream.
		body.Release()
		hold.Free()
		ctx.Request.ResetBody()
		if out.Answer != nil {
			watch.stop()
			in.respondPassthrough(ctx, x, out.Answer)
			return
		}
		if body.Stream {
			ctx.SetStatusCode(fasthttp.StatusOK)
			ctx.SetContentType("text/event-stream")
			ctx.Response.Header.Set("Cache-Control", "no-cache")
			ctx.Response.Header.Set("X-Accel-Buffering", "no")
			ctx.Response.SetBodyStream(newRelay(in, ctx, x, out.Stream, watch), -1)
			return
		}
		in.respondAssembled(ctx, x, out.Stream)
		watch.stop()
		return
	}
}
