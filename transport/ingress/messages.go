package ingress

import (
	"context"
	"errors"
	"strconv"
	"time"

	"github.com/valyala/fasthttp"

	"github.com/narwhal-router/narwhal/transport/fault"
	"github.com/narwhal-router/narwhal/transport/tokenize"
	"github.com/narwhal-router/narwhal/transport/wire"
)

// Anthropic's Messages API. POST /v1/messages is a generation endpoint like chat: the body is
// translated into a chat completions request (wire/messages.go) and runs through the same
// supervisor, placement, legs, timeouts and retries; the relay translates the decode stream
// (relay.go, wire.MessagesStream), the assembler the non-streaming answer. What differs here is
// the shape of the answers that are not the engine's: every error of a Messages path, whoever
// wrote it (authentication, a rejected body, the supervisor's answer before commit, a failed
// assembly), leaves in Anthropic's {"type":"error","error":{type,message}} shape.

// messagesPath reports whether a client path belongs to the Messages API.
func messagesPath(path []byte) bool {
	return string(path) == messagesPrefix || string(path) == countTokensPath
}

const (
	messagesPrefix  = "/v1/messages"
	countTokensPath = "/v1/messages/count_tokens"
)

// messagesAnswer puts an answer of a Messages path into Anthropic's shape once the handler has
// written it: an error body rewritten (its status kept), and the request ID also under
// Anthropic's request-id header, which the Anthropic SDKs read. A streamed answer (the relay's,
// or a held body) is a 200 and left alone.
func messagesAnswer(ctx *fasthttp.RequestCtx) {
	if id := ctx.Response.Header.Peek("x-request-id"); len(id) > 0 {
		ctx.Response.Header.SetBytesV("request-id", id)
	}
	status := ctx.Response.StatusCode()
	if status < 400 || ctx.Response.IsBodyStream() {
		return
	}
	ctx.SetBody(wire.MessagesErrorBody(status, ctx.Response.Body()))
}

// TokenCounter counts a prompt's tokens with its model's tokenizer (placement.tokens), for
// POST /v1/messages/count_tokens. ErrNoTokenizer (transport/tokenize) says the model has none.
type TokenCounter interface {
	CountTokens(ctx context.Context, body *wire.ClientBody) (int, error)
}

// countTokens answers POST /v1/messages/count_tokens with {"input_tokens": n}: the prompt a
// Messages request with the same fields would run, counted by its model's tokenizer. A model
// with no tokenizer source gets 501 rather than a guessed count; a tokenizer that failed (a
// render that timed out) 502.
func (in *Ingress) countTokens(ctx *fasthttp.RequestCtx, live *liveSettings) {
	arrival := time.Now()
	if !ctx.IsPost() {
		methodNotAllowed(ctx, "POST")
		return
	}
	ctx.Response.Header.Set("x-request-id", clientRequestID(ctx.Request.Header.Peek("X-Request-Id")))
	raw, hold, ok := in.readBody(ctx, live, wire.EndpointMessages, arrival)
	if !ok {
		return
	}
	defer hold.Free()
	body, err := wire.ParseCountTokensBody(raw)
	if err != nil {
		in.rejectBadBody(ctx, live, wire.EndpointMessages, arrival, err)
		return
	}
	n := 0
	if in.counter == nil {
		err = tokenize.ErrNoTokenizer
	} else {
		n, err = in.counter.CountTokens(ctx, body)
	}
	switch {
	case errors.Is(err, tokenize.ErrNoTokenizer):
		in.reject(ctx, live, wire.EndpointMessages, arrival, fasthttp.StatusNotImplemented, fault.ErrorBody{
			Message: "count_tokens needs the tokenizer of " + strconv.Quote(body.Model) + ", and no tokenizer source (placement.tokens: local or render) is configured for it in this router",
			Type:    fault.ErrorType(fasthttp.StatusNotImplemented), Code: "tokenizer_not_configured"})
	case err != nil:
		in.reject(ctx, live, wire.EndpointMessages, arrival, fasthttp.StatusBadGateway, fault.ErrorBody{
			Message: err.Error(), Type: fault.ErrorType(fasthttp.StatusBadGateway), Code: "tokenizer_failed"})
	default:
		ctx.SetStatusCode(fasthttp.StatusOK)
		ctx.SetContentType("application/json")
		ctx.SetBody(strconv.AppendInt(append(ctx.Response.Body()[:0], `{"input_tokens":`...), int64(n), 10))
		ctx.Response.AppendBodyString("}")
		in.setCommonHeaders(ctx, live, Timing{}, Routing{})
		in.logRejected(ctx, wire.EndpointMessages.String(), arrival, "")
	}
}
