package transport

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"time"

	"github.com/valyala/fasthttp"

	"github.com/narwhal-router/narwhal/transport/fault"
)

// PassthroughResponse is an engine's 200 answer to a passthrough request, body as sent.
type PassthroughResponse struct {
	ContentType string
	Body        []byte
	Completed   time.Time
}

// Passthrough forwards a non-generative request (embeddings, tokenize, score, rerank, ...) to
// this engine on the client's path, the body byte for byte, and reads the whole answer. It is
// bounded by engine.passthrough_timeout_s and the request deadline, its answer by
// server.max_response_bytes, and cancelled with ctx. A
// non-200 answer is a fault like a leg's (4xx passes through, 429/503 are backpressure); its
// phase is PhaseDecode: the request's one engine is its consumer.
func (c *EngineClient) Passthrough(ctx context.Context, req *Request) (PassthroughResponse, error) {
	start := time.Now()
	deadline, byRequest := earliest(start.Add(c.timeouts.Passthrough), req.Deadline)
	hreq := fasthttp.AcquireRequest()
	defer fasthttp.ReleaseRequest(hreq)
	c.prepare(hreq, req, req.Body.Raw())

	resp := fasthttp.AcquireResponse()
	defer fasthttp.ReleaseResponse(resp)
	// An answer (embeddings of a large batch, token lists) is read whole before the client gets
	// it, so it is bounded like an assembled response: by server.max_response_bytes.
	limit := c.timeouts.MaxResponseBytes
	lc, err := openLeg(ctx, c.hc, hreq, resp, deadline, c.timeouts.Connect, false, limit)
	if errors.Is(err, fasthttp.ErrBodyTooLarge) && ctx.Err() == nil {
		return PassthroughResponse{}, c.fault(fault.PhaseDecode, fault.ResponseTooLarge,
			"the engine's answer is larger than server.max_response_bytes ("+strconv.Itoa(limit)+" bytes)", err)
	}
	if err != nil {
		return PassthroughResponse{}, c.legFault(ctx, fault.PhaseDecode, err, byRequest, fault.Timeout,
			fmt.Sprintf("engine did not answer within engine.passthrough_timeout_s (%s)", c.timeouts.Passthrough))
	}
	defer lc.close()
	if f := c.statusFault(fault.PhaseDecode, resp.StatusCode(), resp.Body(), resp); f != nil {
		return PassthroughResponse{}, f
	}
	return PassthroughResponse{ContentType: string(resp.Header.ContentType()),
		Body: append([]byte(nil), resp.Body()...), Completed: time.Now()}, nil
}
