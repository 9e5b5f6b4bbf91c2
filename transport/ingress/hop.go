package ingress

import (
	"github.com/valyala/fasthttp"

	"github.com/narwhal-router/narwhal/transport"
	"github.com/narwhal-router/narwhal/transport/fault"
)

// refuseLoops is next behind refuseLoop: the listener's handler.
func refuseLoops(next fasthttp.RequestHandler) fasthttp.RequestHandler {
	return func(ctx *fasthttp.RequestCtx) {
		if !refuseLoop(ctx) {
			next(ctx)
		}
	}
}

// refuseLoop answers 508 Loop Detected to a request carrying the hop marker the router puts on
// every request it sends an engine (transport.HopHeader): it came back to a Narwhal listener
// through an engine URL that leads to a router (a proxy in front of one, a name resolving to
// one). Routing it again would recurse until descriptors or memory ran out; answering at once
// ends the loop at its first turn, and the engine leg that carried it fails like any engine
// answering 508. It reports whether it answered.
func refuseLoop(ctx *fasthttp.RequestCtx) bool {
	if len(ctx.Request.Header.Peek(transport.HopHeader)) == 0 {
		return false
	}
	writeError(ctx, fasthttp.StatusLoopDetected, fault.ErrorBody{
		Message: "this request was sent by a Narwhal router to one of its engines and has come back to a Narwhal listener: " +
			"an engine URL leads to a router, which would route it again for ever. Point the engine URL at the engine itself",
		Type: "server_error", Code: "loop_detected"})
	return true
}
