package ingress

import (
	"errors"
	"net"
	"strconv"
	"time"

	"github.com/valyala/fasthttp"

	"github.com/narwhal-router/narwhal/transport/fault"
	"github.com/narwhal-router/narwhal/transport/memory"
	"github.com/narwhal-router/narwhal/transport/wire"
)

// Client bodies are read here, not by fasthttp (StreamRequestBody): the memory budget
// (server.max_buffered_bytes, package memory) is asked before a byte of the body is read, and
// the body is read into one buffer of exactly its size. fasthttp would read it first, into a
// pooled buffer rounded up to a power of two that its pool then keeps.

// readBody reads the request's body within server.max_body_bytes and the memory budget. On
// failure the answer is written (413, 503 or a read error) and ok is false; on success the
// caller owns hold and frees it once the body is no longer used.
func (in *Ingress) readBody(ctx *fasthttp.RequestCtx, live *liveSettings, ep wire.Endpoint, arrival time.Time) (raw []byte, hold memory.Hold, ok bool) {
	cl := ctx.Request.Header.ContentLength()
	if cl > in.rt.MaxBodyBytes {
		in.tooLarge(ctx, live, ep, arrival)
		return nil, hold, false
	}
	if budget := in.budget.Limit(); budget > 0 && int64(cl) > budget {
		in.metrics.BufferRefused("too_large")
		lingerOnClose(ctx)
		in.reject(ctx, live, ep, arrival, fasthttp.StatusRequestEntityTooLarge, fault.ErrorBody{
			Message: "request body is larger than the router's whole memory budget, server.max_buffered_bytes (" + strconv.FormatInt(budget, 10) + " bytes)",
			Type:    fault.ErrorType(413), Code: "request_too_large"})
		return nil, hold, false
	}
	raw, hold, err := memory.Read(ctx.RequestBodyStream(), cl, in.rt.MaxBodyBytes, in.budget)
	switch {
	case errors.Is(err, memory.ErrTooLarge):
		in.tooLarge(ctx, live, ep, arrival)
	case errors.Is(err, memory.ErrNoRoom):
		in.bufferFull(ctx, live, ep, arrival)
	case err != nil:
		in.bodyReadFailed(ctx, live, ep, arrival, err)
	default:
		return raw, hold, true
	}
	return nil, hold, false
}

func (in *Ingress) tooLarge(ctx *fasthttp.RequestCtx, live *liveSettings, ep wire.Endpoint, arrival time.Time) {
	lingerOnClose(ctx)
	in.reject(ctx, live, ep, arrival, fasthttp.StatusRequestEntityTooLarge, fault.ErrorBody{
		Message: "request body is larger than server.max_body_bytes (" + strconv.Itoa(in.rt.MaxBodyBytes) + " bytes)",
		Type:    fault.ErrorType(413), Code: "request_too_large"})
}

// bufferFull answers a request the memory budget has no room for, before its body is read.
func (in *Ingress) bufferFull(ctx *fasthttp.RequestCtx, live *liveSettings, ep wire.Endpoint, arrival time.Time) {
	in.metrics.BufferRefused("budget")
	lingerOnClose(ctx)
	ctx.Response.Header.Set("Retry-After", "1")
	in.reject(ctx, live, ep, arrival, fasthttp.StatusServiceUnavailable, fault.ErrorBody{
		Message: "the router holds as many request bytes as its memory budget allows (server.max_buffered_bytes); retry shortly",
		Type:    fault.ErrorType(503), Code: "buffer_full"})
}

func (in *Ingress) bodyReadFailed(ctx *fasthttp.RequestCtx, live *liveSettings, ep wire.Endpoint, arrival time.Time, err error) {
	lingerOnClose(ctx)
	ctx.SetConnectionClose()
	var ne net.Error
	switch {
	case errors.Is(err, fasthttp.ErrBodyTooLarge):
		in.tooLarge(ctx, live, ep, arrival)
	case errors.As(err, &ne) && ne.Timeout():
		in.reject(ctx, live, ep, arrival, fasthttp.StatusRequestTimeout, fault.ErrorBody{
			Message: "the request was not received within server.header_timeout_s",
			Type:    fault.ErrorType(408), Code: "request_timeout"})
	default:
		in.reject(ctx, live, ep, arrival, fasthttp.StatusBadRequest, fault.ErrorBody{
			Message: "the request body could not be read (it ended early or its chunked encoding is malformed)",
			Type:    fault.ErrorType(400), Code: "bad_request"})
	}
}
