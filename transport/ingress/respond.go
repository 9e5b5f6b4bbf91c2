package ingress

import (
	"errors"
	"strconv"
	"time"

	"github.com/goccy/go-json"
	"github.com/valyala/fasthttp"

	"github.com/narwhal-router/narwhal/transport/fault"
	"github.com/narwhal-router/narwhal/transport/wire"
)

// Answers before commit: the supervisor's error responses, rejections, and the headers every
// answer carries.

// answer writes the supervisor's answer before commit: an error response, or nothing for a
// client that is gone.
func (in *Ingress) answer(ctx *fasthttp.RequestCtx, live *liveSettings, v Answer) {
	if v.Status == 0 {
		hangUp(ctx)
		return
	}
	in.setCommonHeaders(ctx, live, v.Timing, v.Routing)
	if v.RetryAfter != "" {
		ctx.Response.Header.Set("Retry-After", v.RetryAfter)
	}
	ctx.SetStatusCode(v.Status)
	ctx.SetContentType("application/json")
	ctx.SetBody(v.Body)
}

// reject answers a request that never reached a supervisor.
func (in *Ingress) reject(ctx *fasthttp.RequestCtx, live *liveSettings, ep wire.Endpoint, arrival time.Time, status int, e fault.ErrorBody) {
	writeError(ctx, status, e)
	in.setCommonHeaders(ctx, live, Timing{}, Routing{})
	in.metrics.Rejected(ep.String(), status, time.Since(arrival))
	code, _ := e.Code.(string)
	in.logRejected(ctx, ep.String(), arrival, code)
}

// rejectBadBody answers 400 for a body wire refused (a *wire.BadRequestError), naming the field.
func (in *Ingress) rejectBadBody(ctx *fasthttp.RequestCtx, live *liveSettings, ep wire.Endpoint, arrival time.Time, err error) {
	var bre *wire.BadRequestError
	errors.As(err, &bre)
	var param *string
	if bre.Param != "" {
		param = &bre.Param
	}
	in.reject(ctx, live, ep, arrival, fasthttp.StatusBadRequest, fault.ErrorBody{Message: bre.Message, Type: fault.ErrorType(400), Param: param, Code: "invalid_request"})
}

// RejectionLog records the requests ingress answers itself (the router's access log).
type RejectionLog interface {
	Rejected(r Rejected)
}

// Rejected is a request ingress answered itself, before any supervisor.
type Rejected struct {
	// ID is the request's X-Request-Id as the response carries it ("" before one was given).
	ID       string
	Endpoint string
	Status   int
	// Code is the error's code (invalid_request, invalid_deadline, unauthorized, …).
	Code    string
	Arrival time.Time
	Total   time.Duration
}

// logRejected tells the rejection log of a request answered here.
func (in *Ingress) logRejected(ctx *fasthttp.RequestCtx, endpoint string, arrival time.Time, code string) {
	if in.rejections == nil {
		return
	}
	if ctx.Response.StatusCode() == fasthttp.StatusTooManyRequests {
		code = "rate_limit_exceeded"
	}
	in.rejections.Rejected(Rejected{ID: string(ctx.Response.Header.Peek("x-request-id")), Endpoint: endpoint,
		Status: ctx.Response.StatusCode(), Code: code, Arrival: arrival, Total: time.Since(arrival)})
}

func (in *Ingress) setCommonHeaders(ctx *fasthttp.RequestCtx, live *liveSettings, t Timing, r Routing) {
	h := &ctx.Response.Header
	h.Set("Server-Timing", serverTiming(t))
	if live.exposeRouting {
		if r.Producer != "" {
			h.Set("x-narwhal-producer", r.Producer)
		}
		if r.Consumer != "" {
			h.Set("x-narwhal-consumer", r.Consumer)
		}
		h.Set("x-narwhal-attempts", strconv.Itoa(r.Attempts))
	}
}

func (in *Ingress) listModels(ctx *fasthttp.RequestCtx) {
	if !ctx.IsGet() {
		methodNotAllowed(ctx, "GET")
		return
	}
	out := struct {
		Object string      `json:"object"`
		Data   []modelCard `json:"data"`
	}{Object: "list", Data: []modelCard{}}
	now := time.Now().Unix()
	for _, m := range in.models.Models() {
		out.Data = append(out.Data, in.modelCard(m, now))
	}
	writeJSON(ctx, fasthttp.StatusOK, out)
}

// modelCard is one model of GET /v1/models: a LoRA adapter with its base model as parent, as
// vLLM lists it.
type modelCard struct {
	ID      string `json:"id"`
	Object  string `json:"object"`
	Created int64  `json:"created"`
	OwnedBy string `json:"owned_by"`
	Parent  string `json:"parent,omitempty"`
}

func (in *Ingress) modelCard(id string, now int64) modelCard {
	return modelCard{ID: id, Object: "model", Created: now, OwnedBy: "narwhal", Parent: in.models.Parent(id)}
}

func methodNotAllowed(ctx *fasthttp.RequestCtx, allow string) {
	ctx.Response.Header.Set("Allow", allow)
	writeError(ctx, fasthttp.StatusMethodNotAllowed, fault.ErrorBody{Message: "use " + allow, Type: "invalid_request_error", Code: "method_not_allowed"})
}

func writeError(ctx *fasthttp.RequestCtx, status int, e fault.ErrorBody) {
	ctx.SetStatusCode(status)
	ctx.SetContentType("application/json")
	ctx.SetBody(fault.AppendErrorEnvelope(nil, e))
}

func writeJSON(ctx *fasthttp.RequestCtx, status int, v any) {
	b, err := json.Marshal(v)
	if err != nil {
		writeError(ctx, fasthttp.StatusInternalServerError, fault.ErrorBody{Message: "internal error", Type: "server_error"})
		return
	}
	ctx.SetStatusCode(status)
	ctx.SetContentType("application/json")
	ctx.SetBody(b)
}
