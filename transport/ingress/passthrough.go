package ingress

import (
	"time"

	"github.com/valyala/fasthttp"

	"github.com/narwhal-router/narwhal/transport"
	"github.com/narwhal-router/narwhal/transport/fault"
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
// its body and content type as sent.
func (in *Ingress) respondPassthrough(ctx *fasthttp.RequestCtx, x *Exchange, ans *transport.PassthroughResponse) {
	ctx.SetStatusCode(fasthttp.StatusOK)
	if ans.ContentType != "" {
		ctx.Response.Header.SetContentType(ans.ContentType)
	}
	ctx.SetBody(ans.Body)
	end := &StreamFinished{Ended: time.Now()}
	if t, ok := wire.TokensOf(ans.Body); ok { // embeddings, score and rerank report usage
		x.countTokens(end, t)
	}
	in.dispatcher.Finished(x, end)
	x.endTrace(fasthttp.StatusOK, end)
}

// retrieveModel answers GET /v1/models/{id}: the model object, or 404 in the OpenAI envelope.
func (in *Ingress) retrieveModel(ctx *fasthttp.RequestCtx, id string) {
	if !ctx.IsGet() {
		methodNotAllowed(ctx, "GET")
		return
	}
	for _, m := range in.models.Models() {
		if m == id {
			writeJSON(ctx, fasthttp.StatusOK, struct {
				ID      string `json:"id"`
				Object  string `json:"object"`
				Created int64  `json:"created"`
				OwnedBy string `json:"owned_by"`
			}{m, "model", time.Now().Unix(), "narwhal"})
			return
		}
	}
	param := "model"
	writeError(ctx, fasthttp.StatusNotFound, fault.ErrorBody{Message: "the model `" + id + "` does not exist",
		Type: "invalid_request_error", Param: &param, Code: "model_not_found"})
}
