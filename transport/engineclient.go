package transport

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/goccy/go-json"
	"github.com/valyala/bytebufferpool"
	"github.com/valyala/fasthttp"

	"github.com/narwhal-router/narwhal/config"
	"github.com/narwhal-router/narwhal/transport/fault"
	"github.com/narwhal-router/narwhal/transport/kv"
	"github.com/narwhal-router/narwhal/transport/memory"
	"github.com/narwhal-router/narwhal/transport/wire"
)

// EngineClient speaks to one vLLM-compatible engine: the prefill leg, the decode leg and the
// small GET endpoints probes use. It is safe for concurrent use.
type EngineClient struct {
	name      string
	base      string
	urls      [wire.EndpointCount]string
	hc        *fasthttp.HostClient
	auth      string
	kv        kv.Side
	connector kv.Connector
	// timeouts are engine.*; maxResponse is server.max_response_bytes (a passthrough answer).
	timeouts    config.EngineTimeouts
	maxResponse int
}

// Request is one attempt's view of a client request, as both legs send it.
type Request struct {
	Body *wire.ClientBody
	// BackendRequestID is the X-Request-Id of both legs of the attempt; fresh per attempt.
	BackendRequestID string
	// Deadline is the original request's deadline; every leg ends by then.
	Deadline time.Time
	// TraceParent and TraceState are the client's W3C trace headers, forwarded when present.
	TraceParent string
	TraceState  string
	// Transfer is the attempt's transfer parameters, as the producer's connector planned them
	// for the pair (Run does). Zero: Prefill asks the producer's connector for a plan of its own,
	// with no consumer, which only a sequential connector supports.
	Transfer kv.Transfer
	// Budget is the process's memory budget: a passthrough answer is reserved in it before it
	// is read. Nil (probes, preflight): bounded by server.max_response_bytes alone.
	Budget *memory.Budget
	// Ranks are the data-parallel ranks each leg (by fault.Phase) is pinned to, sent as
	// RankHeader; Run sets them from the Plan.
	Ranks [2]Rank
}

// largeBody is the client body size from which a leg's body is sent by reference
// (wire.LegBody) rather than rewritten into a pooled buffer: a long prompt is then held once,
// not once more per leg.
const largeBody = 64 << 10

// maxPrefillBody bounds a prefill response (one token plus the descriptor, or prompt logprobs).
const maxPrefillBody = 16 << 20

// maxErrorBody bounds an engine error body kept for the client.
const maxErrorBody = 64 << 10

// NewEngineClient builds the client for one provisioned engine (Provisioner.Engine resolves it,
// its connector included), bounded by the engine section's timeouts and by maxResponseBytes
// (server.max_response_bytes) for a passthrough answer.
func NewEngineClient(e EngineSpec, t config.EngineTimeouts, maxResponseBytes int) *EngineClient {
	maxConns := 1 << 20
	if e.MaxInflight > 0 {
		maxConns = e.MaxInflight + 64 // headroom for probes and connections still closing
	}
	c := &EngineClient{
		name: e.Name,
		base: e.Base,
		hc: &fasthttp.HostClient{
			Addr:                e.Addr,
			IsTLS:               e.TLS,
			Name:                "narwhal",
			MaxConns:            maxConns,
			MaxIdleConnDuration: t.IdleConnTimeoutS.Duration(),
			ConnPoolStrategy:    fasthttp.LIFO,
			// Each open decode stream holds its connection's read buffer: 2 KiB fits an engine's
			// response headers with room to spare and halves what a stream costs.
			ReadBufferSize: 2048,
		},
		kv:          e.KV,
		connector:   e.Connector,
		timeouts:    t,
		maxResponse: maxResponseBytes,
	}
	if e.APIKey != "" {
		c.auth = "Bearer " + e.APIKey
	}
	for ep := wire.EndpointCompletions; ep < wire.EndpointCount; ep++ {
		c.urls[ep] = c.base + ep.Path()
	}
	return c
}

// Name is the engine's configured name.
func (c *EngineClient) Name() string { return c.name }

// BaseURL is the engine's URL without a path, as a render call is addressed (transport/tokenize).
func (c *EngineClient) BaseURL() string { return c.base }

// Close drops the idle connections to the engine.
func (c *EngineClient) Close() { c.hc.CloseIdleConnections() }

// Prefill runs the prefill leg: a non-streaming one-token request whose generated token is
// discarded. It returns once the response is fully read. The leg is bounded by
// engine.prefill_timeout_s and the request deadline, and cancelled with ctx.
func (c *EngineClient) Prefill(ctx context.Context, req *Request) (PrefillResult, error) {
	start := time.Now()
	deadline, byRequest := earliest(start.Add(c.timeouts.PrefillTimeoutS.Duration()), req.Deadline)

	hreq := fasthttp.AcquireRequest()
	defer fasthttp.ReleaseRequest(hreq)
	params := req.Transfer.Prefill
	if params == nil {
		params = c.connector.Plan(kv.Attempt{Pair: kv.Pair{Producer: c.kv, Endpoint: req.Body.Endpoint},
			BackendRequestID: req.BackendRequestID}).Prefill
	}
	byRef, buf := c.legBody(hreq, req, fault.PhasePrefill, params)
	if buf != nil {
		defer bytebufferpool.Put(buf)
	}

	resp := fasthttp.AcquireResponse()
	defer fasthttp.ReleaseResponse(resp)
	lc, err := openLeg(ctx, c.hc, hreq, byRef, resp, deadline, c.timeouts.ConnectTimeoutS.Duration(), false, maxPrefillBody)
	if err != nil {
		return PrefillResult{}, c.legFault(ctx, fault.PhasePrefill, err, byRequest, fault.Timeout,
			fmt.Sprintf("prefill engine did not answer within %s", c.timeouts.PrefillTimeoutS.Duration()))
	}
	defer lc.close()
	if f := c.encodingFault(fault.PhasePrefill, resp); f != nil {
		return PrefillResult{}, f
	}
	if f := c.statusFault(fault.PhasePrefill, resp.StatusCode(), resp.Body(), resp); f != nil {
		return PrefillResult{}, f
	}

	res := PrefillResult{
		producerKV:       c.kv,
		connector:        c.connector,
		Producer:         c.name,
		ProducerURL:      c.base,
		Endpoint:         req.Body.Endpoint,
		BackendRequestID: req.BackendRequestID,
		Started:          start,
		Completed:        time.Now(),
	}
	body := resp.Body()
	fields, err := wire.ScanObject(body, make([]wire.Field, 0, 12)) // validates the whole body
	if err != nil {
		return PrefillResult{}, c.fault(fault.PhasePrefill, fault.BadResponse, "prefill response is "+err.Error(), nil)
	}
	res.CachedTokens = wire.CachedTokens(body)
	v, ok := wire.Member(body, fields, "kv_transfer_params")
	if !ok || wire.IsNull(v) {
		return res, nil
	}
	raw := append([]byte(nil), v...) // resp is recycled on return
	d, rej := kv.ParseDescriptor(raw, req.Body.Endpoint)
	if rej != nil {
		return PrefillResult{}, c.descriptorFault(rej)
	}
	res.descriptor = d
	return res, nil
}

// Decode validates res's descriptor for this engine, opens the decode stream and returns once
// the first generated token has arrived, so the caller may commit. Connecting, headers and the
// wait for that token share engine.first_token_timeout_s. A result without a descriptor (see
// PrefillResult.WithoutTransfer) decodes with no transfer parameters at all.
func (c *EngineClient) Decode(ctx context.Context, res PrefillResult, req *Request) (*DecodeStream, error) {
	if f := c.validateHandoff(res, req); f != nil {
		return nil, f
	}
	return c.decode(ctx, res, req)
}

// validateHandoff checks res's descriptor for this engine as its consumer (none: nothing to
// check); a rejection is the producer's fault.
func (c *EngineClient) validateHandoff(res PrefillResult, req *Request) *fault.Fault {
	if res.descriptor == nil {
		return nil
	}
	pair := kv.Pair{Producer: res.producerKV, Consumer: c.kv, Endpoint: req.Body.Endpoint}
	if rej := kv.ValidateDescriptor(res.connector, res.descriptor, pair); rej != nil {
		f := c.descriptorFault(rej)
		f.Engine = res.Producer
		return f
	}
	return nil
}

// decode is Decode for a handoff already validated (validateHandoff).
func (c *EngineClient) decode(ctx context.Context, res PrefillResult, req *Request) (*DecodeStream, error) {
	start := time.Now()
	var params []byte
	if res.descriptor != nil {
		params = res.descriptor.Raw()
	}
	deadline, byRequest := earliest(start.Add(c.timeouts.FirstTokenTimeoutS.Duration()), req.Deadline)

	hreq := fasthttp.AcquireRequest()
	defer fasthttp.ReleaseRequest(hreq)
	byRef, buf := c.legBody(hreq, req, fault.PhaseDecode, params)
	if buf != nil {
		defer bytebufferpool.Put(buf)
	}

	resp := fasthttp.AcquireResponse()
	lc, err := openLeg(ctx, c.hc, hreq, byRef, resp, deadline, c.timeouts.ConnectTimeoutS.Duration(), true, 0)
	if err != nil {
		fasthttp.ReleaseResponse(resp)
		return nil, c.legFault(ctx, fault.PhaseDecode, err, byRequest, fault.FirstTokenTimeout, c.firstTokenDetail())
	}
	s := newDecodeStream(ctx, c, lc, resp, req.Deadline)
	if f := c.encodingFault(fault.PhaseDecode, resp); f != nil {
		s.Close()
		return nil, f
	}
	if status := resp.StatusCode(); status != fasthttp.StatusOK {
		body, _ := s.readAll(maxErrorBody)
		f := c.statusFault(fault.PhaseDecode, status, body, resp)
		s.Close()
		return nil, f
	}
	if ct := resp.Header.ContentType(); len(ct) < 17 || string(ct[:17]) != "text/event-stream" {
		s.Close()
		return nil, c.fault(fault.PhaseDecode, fault.BadResponse, "decode response is not an event stream ("+string(ct)+")", nil)
	}
	if err := s.awaitFirstToken(deadline, byRequest); err != nil {
		s.Close()
		return nil, err
	}
	return s, nil
}

// planned is the PrefillResult of a concurrent plan, for a decode that starts together with its
// prefill: its descriptor is the plan's decode parameters (validated by the connector like a
// producer's), and the handoff's age counts from start.
func planned(producer *EngineClient, req *Request, start time.Time) (PrefillResult, error) {
	res := PrefillResult{producerKV: producer.kv, connector: producer.connector, Producer: producer.name,
		ProducerURL: producer.base, Endpoint: req.Body.Endpoint, BackendRequestID: req.BackendRequestID,
		Started: start}
	if !json.Valid(req.Transfer.Decode) {
		return PrefillResult{}, producer.fault(fault.PhasePrefill, fault.Descriptor,
			"connector "+producer.connector.Name()+" planned decode parameters that are not JSON", nil)
	}
	d, rej := kv.ParseDescriptor(req.Transfer.Decode, req.Body.Endpoint)
	if rej != nil {
		return PrefillResult{}, producer.descriptorFault(rej)
	}
	res.descriptor = d
	return res, nil
}

func (c *EngineClient) firstTokenDetail() string {
	return fmt.Sprintf("no token from the decode engine within %s", c.timeouts.FirstTokenTimeoutS.Duration())
}

// legBody prepares hreq for one leg with its rewritten body: for a small client body, rewritten
// into buf, a pooled buffer the caller puts back; for a large one (largeBody), sent by reference
// (byRef, which openLeg writes on each try) so that the client's bytes are not copied.
func (c *EngineClient) legBody(hreq *fasthttp.Request, req *Request, leg fault.Phase, params []byte) (byRef *wire.LegBody, buf *bytebufferpool.ByteBuffer) {
	if len(req.Body.Raw()) >= largeBody {
		if leg == fault.PhasePrefill {
			byRef = req.Body.PrefillLegBody(params)
		} else {
			byRef = req.Body.DecodeLegBody(params)
		}
		c.prepare(hreq, req, leg, nil)
		setRank(hreq, req, leg)
		return byRef, nil
	}
	buf = bytebufferpool.Get()
	if leg == fault.PhasePrefill {
		buf.B = req.Body.AppendPrefillBody(buf.B[:0], params)
	} else {
		buf.B = req.Body.AppendDecodeBody(buf.B[:0], params)
	}
	c.prepare(hreq, req, leg, buf.B)
	setRank(hreq, req, leg)
	return nil, buf
}

// prepare fills the request line and the allowlisted headers; no client header reaches an engine
// unless it is listed here.
func (c *EngineClient) prepare(hreq *fasthttp.Request, req *Request, leg fault.Phase, body []byte) {
	hreq.Header.SetMethod(fasthttp.MethodPost)
	hreq.SetRequestURI(c.urls[req.Body.Endpoint])
	hreq.Header.SetContentType("application/json")
	// The router relays and reads engine bodies as sent: a compressed one would reach a client
	// without its Content-Encoding, or fail to parse. Engines are asked for none
	// (encodingFault refuses one that compresses anyway).
	hreq.Header.Set("Accept-Encoding", "identity")
	hreq.Header.Set("X-Request-Id", req.BackendRequestID)
	hreq.Header.Set(HopHeader, "1")
	setRankHeader(hreq.Header.Set, req, leg)
	if req.TraceParent != "" {
		hreq.Header.Set("traceparent", req.TraceParent)
		if req.TraceState != "" {
			hreq.Header.Set("tracestate", req.TraceState)
		}
	}
	if c.auth != "" {
		hreq.Header.Set("Authorization", c.auth)
	}
	if body != nil {
		hreq.SetBodyRaw(body)
	}
}

// encodingFault refuses an engine answer with a Content-Encoding other than identity: the
// router asked for none, and can neither read nor relay a compressed body as sent.
func (c *EngineClient) encodingFault(leg fault.Phase, resp *fasthttp.Response) *fault.Fault {
	ce := resp.Header.ContentEncoding()
	if len(ce) == 0 || strings.EqualFold(strings.TrimSpace(string(ce)), "identity") {
		return nil
	}
	return c.fault(leg, fault.BadResponse, "engine answered with Content-Encoding "+strconv.Quote(excerptText(ce))+", though asked for identity", nil)
}

// excerptText is at most 32 bytes of an engine's header, for a message.
func excerptText(b []byte) string {
	if len(b) > 32 {
		b = b[:32]
	}
	return strings.ToValidUTF8(string(b), "?")
}

// legFault turns an error from opening or reading a leg into a Fault. A cancelled context wins
// over whatever the closed connection reported; a timeout is the request's deadline when that
// bound the leg, else the leg's own timeout kind.
func (c *EngineClient) legFault(ctx context.Context, leg fault.Phase, err error, byRequest bool, timeoutKind fault.Kind, timeoutDetail string) *fault.Fault {
	if ctx.Err() != nil {
		return fault.FromContext(ctx, c.name, leg)
	}
	if isTimeout(err) {
		if errors.Is(err, fasthttp.ErrDialTimeout) && !byRequest {
			return c.fault(leg, fault.Timeout, "could not connect to the engine in time", err)
		}
		if byRequest {
			return c.fault(leg, fault.Deadline, "the request deadline passed during the "+leg.String()+" leg", err)
		}
		return c.fault(leg, timeoutKind, timeoutDetail, err)
	}
	if errors.Is(err, fasthttp.ErrBodyTooLarge) {
		return c.fault(leg, fault.BadResponse, "engine response is too large", err)
	}
	if errors.Is(err, syscall.EMFILE) || errors.Is(err, syscall.ENFILE) || errors.Is(err, fasthttp.ErrNoFreeConns) {
		return c.fault(leg, fault.Overloaded, "the router has no connection to spare", err)
	}
	return c.fault(leg, fault.Unreachable, "could not reach the engine or it closed the connection before answering", err)
}

func (c *EngineClient) fault(leg fault.Phase, kind fault.Kind, detail string, err error) *fault.Fault {
	return &fault.Fault{Kind: kind, Phase: leg, Engine: c.name, Detail: detail, Err: err}
}

// descriptorFault reports a rejected descriptor. The client sees only the reason: the
// rejection's own detail names engine identities and KV addresses, which stay in the logs.
func (c *EngineClient) descriptorFault(rej *kv.Rejection) *fault.Fault {
	return &fault.Fault{Kind: fault.Descriptor, Phase: fault.PhasePrefill, Engine: c.name, Reason: rej.Reason,
		Detail: "the producer's handoff descriptor failed validation (" + rej.Reason + ")", Err: rej}
}

// statusFault maps a non-200 engine answer: 429/503 are backpressure, other 4xx are the client's
// problem and pass through, everything else is an engine failure.
func (c *EngineClient) statusFault(leg fault.Phase, status int, body []byte, resp *fasthttp.Response) *fault.Fault {
	if status == fasthttp.StatusOK {
		return nil
	}
	f := &fault.Fault{Phase: leg, Engine: c.name, Status: status, Body: append([]byte(nil), body...)}
	switch {
	case status == fasthttp.StatusTooManyRequests || status == fasthttp.StatusServiceUnavailable:
		f.Kind = fault.Backpressure
		f.Detail = "engine is overloaded (" + strconv.Itoa(status) + ")"
		f.RetryAfter = string(resp.Header.Peek("Retry-After"))
	case status >= 400 && status < 500:
		f.Kind = fault.Rejected
		f.Detail = "engine rejected the request (" + strconv.Itoa(status) + ")"
	default:
		f.Kind = fault.Status
		f.Detail = "engine failed (" + strconv.Itoa(status) + ")"
	}
	return f
}

// earliest returns the earlier of a leg's own deadline and the request's, and whether the
// request's was the binding one.
func earliest(leg, request time.Time) (time.Time, bool) {
	if !request.IsZero() && !request.After(leg) {
		return request, true
	}
	return leg, false
}
