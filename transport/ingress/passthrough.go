package ingress

import (
	"time"

	"github.com/valyala/fasthttp"

	"github.com/narwhal-router/narwhal/messages"
	"github.com/narwhal-router/narwhal/transport/fault"
	"github.com/narwhal-router/narwhal/transport/wire"
)

// The passthrough endpoints (/v1/embeddings, /tokenize, /detokenize, /v1/score, /v1/rerank,
// /rerank, /v2/rerank) generate nothing, so they are not split: the supervisor places the
// request as any other (admission queue, breakers, retries, the access log) and ingress sends
// the client's body byte for byte to the planned consumer, bounded by
// engine.passthrough_timeout_s. The engine's 200 answer is the client's, byte for byte; a failure
// is a decode-leg fault of that engine, judged and retried like one. The supervisor plans no
// producer for these (Plan.Producer is nil): only the consumer's decode slot is taken.

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

// passthrough runs one planned passthrough attempt and reports it. It reports true when the
// client has its answer (the engine's), false when the supervisor decides what comes next.
func (in *Ingress) passthrough(ctx *fasthttp.RequestCtx, x *Exchange, p *Plan, watch goneWatch) bool {
	out := Outcome{Attempt: p.Attempt} // no DecodeStarted: there is no handoff to age
	x.prefillStart.Store(time.Now().UnixNano())
	x.setProgress(fault.PhaseDecode, true)
	resp, err := p.Consumer.Passthrough(x.ctx, x.EngineRequest(p.BackendRequestID))
	x.setProgress(0, false)
	if err != nil {
		out.Fault = faultOf(err, fault.PhaseDecode, p.Consumer.Name())
		in.dispatcher.AttemptEnded(x, out.Report())
		return false
	}
	m := out.Report()
	m.Committed, m.FirstTokenAt = true, resp.Completed
	in.dispatcher.AttemptEnded(x, m)

	watch.stop()
	in.setCommonHeaders(ctx, Timing{FirstByte: resp.Completed.Sub(x.Arrival)},
		Routing{Consumer: p.Consumer.Name(), Attempts: p.Attempt})
	x.Body.Release()
	ctx.Request.ResetBody()
	ctx.SetStatusCode(fasthttp.StatusOK)
	if resp.ContentType != "" {
		ctx.Response.Header.SetContentType(resp.ContentType)
	}
	ctx.SetBody(resp.Body)
	in.dispatcher.Finished(x, &messages.StreamFinished{Ended: time.Now()})
	return true
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
