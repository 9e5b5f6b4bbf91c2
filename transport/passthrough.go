package transport

import (
	"context"
	"errors"
	"fmt"
	"io"
	"mime"
	"strconv"
	"time"

	"github.com/valyala/fasthttp"

	"github.com/narwhal-router/narwhal/transport/fault"
	"github.com/narwhal-router/narwhal/transport/memory"
)

// PassthroughResponse is an engine's 200 answer to a passthrough request, body as sent: Body's
// pieces in order (one, unless the engine sent it chunked). Hold is its reservation in the
// memory budget: whoever writes Body out frees it once written.
type PassthroughResponse struct {
	ContentType string
	Body        [][]byte
	Completed   time.Time
	Hold        memory.Hold
}

// Passthrough forwards a non-generative request (embeddings, tokenize, score, rerank, ...) to
// this engine on the client's path, the body byte for byte, and reads the whole answer. It is
// bounded by engine.passthrough_timeout_s and the request deadline, its answer by
// server.max_response_bytes and the memory budget (req.Budget), and cancelled with ctx. A
// non-200 answer is a fault like a leg's (4xx passes through, 429/503 are backpressure); its
// phase is PhaseDecode: the request's one engine is its consumer.
//
// The answer is read once, into a buffer of its size that the client's response then sends
// (no copy in fasthttp's pools, which would keep it). Only a JSON answer is relayed: the
// passthrough endpoints answer JSON, and an engine's HTML error page or a compressed body is a
// bad_response rather than something to hand a client.
func (c *EngineClient) Passthrough(ctx context.Context, req *Request) (PassthroughResponse, error) {
	start := time.Now()
	deadline, byRequest := earliest(start.Add(c.timeouts.PassthroughTimeoutS.Duration()), req.Deadline)
	hreq := fasthttp.AcquireRequest()
	defer fasthttp.ReleaseRequest(hreq)
	c.prepare(hreq, req, fault.PhaseDecode, req.Body.Raw())

	resp := fasthttp.AcquireResponse()
	defer fasthttp.ReleaseResponse(resp)
	lc, err := openLeg(ctx, c.hc, hreq, nil, resp, deadline, c.timeouts.ConnectTimeoutS.Duration(), true, 0)
	if err != nil {
		return PassthroughResponse{}, c.legFault(ctx, fault.PhaseDecode, err, byRequest, fault.Timeout,
			fmt.Sprintf("engine did not answer within engine.passthrough_timeout_s (%s)", c.timeouts.PassthroughTimeoutS.Duration()))
	}
	defer lc.close()
	if f := c.encodingFault(fault.PhaseDecode, resp); f != nil {
		return PassthroughResponse{}, f
	}
	if status := resp.StatusCode(); status != fasthttp.StatusOK {
		body, _ := io.ReadAll(io.LimitReader(resp.BodyStream(), maxErrorBody))
		return PassthroughResponse{}, c.statusFault(fault.PhaseDecode, status, body, resp)
	}
	ct := string(resp.Header.ContentType())
	if mt, _, err := mime.ParseMediaType(ct); err != nil || mt != "application/json" {
		return PassthroughResponse{}, c.fault(fault.PhaseDecode, fault.BadResponse,
			"passthrough answer is "+strconv.Quote(excerptText([]byte(ct)))+", not application/json", nil)
	}
	limit := c.maxResponse
	body, hold, err := memory.ReadChunks(resp.BodyStream(), resp.Header.ContentLength(), limit, req.Budget)
	switch {
	case errors.Is(err, memory.ErrTooLarge):
		return PassthroughResponse{}, c.fault(fault.PhaseDecode, fault.ResponseTooLarge,
			"the engine's answer is larger than server.max_response_bytes ("+strconv.Itoa(limit)+" bytes)", nil)
	case errors.Is(err, memory.ErrNoRoom):
		return PassthroughResponse{}, c.fault(fault.PhaseDecode, fault.Overloaded,
			"the router's memory budget (server.max_buffered_bytes) has no room for the engine's answer", err)
	case err != nil:
		return PassthroughResponse{}, c.legFault(ctx, fault.PhaseDecode, err, byRequest, fault.Timeout,
			fmt.Sprintf("engine did not answer within engine.passthrough_timeout_s (%s)", c.timeouts.PassthroughTimeoutS.Duration()))
	}
	lc.bodyDone = true
	return PassthroughResponse{ContentType: ct, Body: body, Completed: time.Now(), Hold: hold}, nil
}
