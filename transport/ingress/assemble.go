package ingress

import (
	"errors"
	"io"
	"strconv"
	"time"

	"github.com/valyala/fasthttp"

	"github.com/narwhal-router/narwhal/transport"
	"github.com/narwhal-router/narwhal/transport/fault"
	"github.com/narwhal-router/narwhal/transport/memory"
	"github.com/narwhal-router/narwhal/transport/wire"
)

// respondAssembled reads a committed stream to its end and answers with one JSON body. Nothing
// has reached the client yet, so a failure after the first token still gets an error status.
func (in *Ingress) respondAssembled(ctx *fasthttp.RequestCtx, x *Exchange, s *transport.DecodeStream) {
	a := wire.NewAssembler(x.Body.Endpoint)
	end := &StreamFinished{}
	events, assembled := 0, 0
	// What is assembled is held in the memory budget (reserved in steps as it grows) until
	// the response is written.
	var hold memory.Hold
	defer func() { hold.Free() }()
	for {
		ev, err := s.Next()
		if err != nil {
			if !errors.Is(err, io.EOF) {
				end.Fault, _ = fault.As(err)
			}
			break
		}
		if ev.Kind == wire.EventToken {
			events++
		}
		// server.max_response_bytes: an engine that streams without end costs a bounded amount
		// of memory, not the whole request deadline's worth. The bound is the operator's, not
		// the engine's failure (response_too_large: not retried, not counted by the breaker).
		if assembled += len(ev.Data); assembled > in.rt.MaxResponseBytes {
			end.Fault = &fault.Fault{Kind: fault.ResponseTooLarge, Phase: fault.PhaseDecode, Engine: s.Engine(),
				Detail: "decode stream is larger than server.max_response_bytes (" + strconv.Itoa(in.rt.MaxResponseBytes) + " bytes)"}
			break
		}
		if int64(assembled) > hold.Size() && !hold.Grow(in.budget, max(64<<10, int64(assembled)-hold.Size())) {
			in.metrics.BufferRefused("answer")
			end.Fault = &fault.Fault{Kind: fault.Overloaded, Phase: fault.PhaseDecode, Engine: s.Engine(),
				Detail: "the router's memory budget (server.max_buffered_bytes) has no room for the response"}
			break
		}
		if ev.Kind == wire.EventUsage || ev.Kind == wire.EventDone { // a Responses stream's usage is in its last event
			ev.Data = x.CorrectUsage(ev.Data)
		}
		a.Add(ev.Data)
	}
	s.Close()
	if t, ok := wire.UsageTokens(a.Usage()); ok {
		x.countTokens(end, t)
	}
	if end.OutputTokens == 0 {
		end.OutputTokens = events
	}
	if f := end.Fault; f != nil {
		if f.Kind == fault.Canceled && errors.Is(f.Err, fault.ErrClientGone) {
			end.ClientGone = true
			hangUp(ctx)
		} else {
			ctx.SetStatusCode(f.ClientStatus())
			ctx.SetContentType("application/json")
			ctx.SetBody(fault.ClientBody(f, x.live.exposeErrors))
		}
	} else if out, err := a.Body(); err != nil {
		end.Fault = &fault.Fault{Kind: fault.BadResponse, Phase: fault.PhaseDecode, Engine: s.Engine(), Detail: "could not assemble the response", Err: err}
		ctx.SetStatusCode(fasthttp.StatusBadGateway)
		ctx.SetContentType("application/json")
		ctx.SetBody(fault.ClientBody(end.Fault, x.live.exposeErrors))
	} else {
		ctx.SetStatusCode(fasthttp.StatusOK)
		ctx.SetContentType("application/json")
		sendHeld(ctx, [][]byte{out}, hold) // frees the hold once written
		hold = memory.Hold{}
	}
	end.Ended = time.Now()
	in.dispatcher.Finished(x, end)
	status := ctx.Response.StatusCode()
	if end.ClientGone {
		status = 0
	}
	x.endTrace(status, end)
}
