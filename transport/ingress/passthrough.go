package ingress

import (
	"time"

	"github.com/valyala/fasthttp"

	"github.com/narwhal-router/narwhal/transport"
	"github.com/narwhal-router/narwhal/transport/fault"
	"github.com/narwhal-router/narwhal/transport/memory"
	"github.com/narwhal-router/narwhal/transport/wire"
)

// The passthrough endpoints (/v1/embeddings, /tokenize, /detokenize, /v1/score, /v1/rerank,
// /rerank, /v2/rerank) generate nothing, so they are not split: the supervisor places the
// request as any other (admission queue, breakers, retries, the access log) and ingress sends
// the client's body byte for byte to the planned consumer, bounded by
// engine.passthrough_timeout_s. The engine's 200 answer is the client's, byte for byte; a failure
// is a decode-leg fault of that engine, judged and retried like one. The supervisor plans no
// producer for these (the plan's Producer is nil): only the consumer's decode slot is taken.

// parseBody validates a client body for ep.
func (in *Ingress) parseBody(ep wire.Endpoint, raw []byte) (*wire.ClientBody, error) {
	if !ep.Passthrough() {
		return wire.ParseClientBody(ep, raw)
	}
	def := ""
	if ms := in.models.Models(); len(ms) == 1 {
		def = ms[0] // vLLM lets tokenize and rerank omit the model: the engine's own is meant
	}
	return wire.ParsePassthroughBody(ep, raw, def)
}

// respondPassthrough answers with a committed passthrough attempt's answer: the engine's 200,
// its body and content type as sent, and no other header of the engine's (the router's own
// are x-request-id, Server-Timing and, when on, the routing headers). The body is the buffer
// the answer was read into, sent without a copy; its reservation is freed once it is written
// (or the connection is gone).
func (in *Ingress) respondPassthrough(ctx *fasthttp.RequestCtx, x *Exchange, ans *transport.PassthroughResponse) {
	ctx.SetStatusCode(fasthttp.StatusOK)
	ctx.Response.Header.SetContentType(ans.ContentType)
	end := &StreamFinished{Ended: time.Now()}
	// Embeddings, score and rerank report usage. An answer the engine sent chunked is held in
	// pieces, and its usage is not counted: reading it would mean joining the pieces, which the
	// memory budget exists to avoid.
	if len(ans.Body) == 1 {
		if t, ok := wire.TokensOf(ans.Body[0]); ok {
			x.countTokens(end, t)
		}
	}
	sendHeld(ctx, ans.Body, ans.Hold)
	in.dispatcher.Finished(x, end)
	x.endTrace(fasthttp.StatusOK, end)
}

// sendHeld makes chunks (in order) the response body, written from them, and frees hold once
// fasthttp has written it or dropped the response (it closes a body stream either way).
func sendHeld(ctx *fasthttp.RequestCtx, chunks [][]byte, hold memory.Hold) {
	body := wire.LegBodyOf(chunks)
	ctx.Response.SetBodyStream(&heldBody{LegBodyReader: body.Reader(), hold: hold}, body.Len())
}

// heldBody is a response body the memory budget holds until it is written. Its reader is an
// io.WriterTo: fasthttp's copy then writes each piece at once, with no buffer of its own.
type heldBody struct {
	*wire.LegBodyReader
	hold memory.Hold
}

func (h *heldBody) Close() error {
	h.hold.Free()
	return nil
}

// retrieveModel answers GET /v1/models/{id}: the model object, or 404 in the OpenAI envelope.
func (in *Ingress) retrieveModel(ctx *fasthttp.RequestCtx, id string) {
	if !ctx.IsGet() {
		methodNotAllowed(ctx, "GET")
		return
	}
	for _, m := range in.models.Models() {
		if m == id {
			writeJSON(ctx, fasthttp.StatusOK, in.modelCard(m, time.Now().Unix()))
			return
		}
	}
	param := "model"
	writeError(ctx, fasthttp.StatusNotFound, fault.ErrorBody{Message: "the model `" + id + "` does not exist",
		Type: "invalid_request_error", Param: &param, Code: "model_not_found"})
}
