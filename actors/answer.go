package actors

import (
	"github.com/asynkron/protoactor-go/actor"

	"github.com/narwhal-router/narwhal/transport/fault"
	"github.com/narwhal-router/narwhal/transport/ingress"
)

// respondFault answers the request with the fault that ended it before commit: the status and
// body the fault table gives it, and a Retry-After on a 503.
func (s *requestSupervisor) respondFault(ctx actor.Context, f *fault.Fault) {
	s.lastFault = f
	status := f.ClientStatus()
	a := ingress.Answer{Status: status, Body: fault.ClientBody(f, s.set.exposeEngineErrors), Timing: s.timing(), Routing: s.routing()}
	if status == 503 {
		a.RetryAfter = f.RetryAfter
		if a.RetryAfter == "" {
			a.RetryAfter = s.set.request.RetryAfter
		}
	}
	s.answer(a)
	s.finalize(ctx, status, outcomeError)
}

func (s *requestSupervisor) respondShutdown(ctx actor.Context) {
	s.respondFault(ctx, &fault.Fault{Kind: fault.Aborted, Detail: errShutdown.Error(), Err: errShutdown})
}

// reject answers a request that could not be placed.
func (s *requestSupervisor) reject(ctx actor.Context, status int, message, code string) {
	a := ingress.Answer{Status: status, Timing: s.timing(), Routing: s.routing(),
		Body: fault.AppendErrorEnvelope(nil, fault.ErrorBody{Message: message, Code: code, Type: errorTypeFor(status)})}
	if status == 503 || status == 429 {
		a.RetryAfter = s.set.request.RetryAfter
		s.env.metrics.AdmissionRejected(code)
	}
	s.answer(a)
	s.finalize(ctx, status, outcomeRejected)
}

func errorTypeFor(status int) string {
	switch status {
	case 404:
		return "invalid_request_error"
	case 429:
		return "rate_limit_error"
	}
	return "service_unavailable"
}

// finishGone ends a request whose client hung up: nothing to answer.
func (s *requestSupervisor) finishGone(ctx actor.Context) {
	s.env.metrics.ClientDisconnect(s.stage.String())
	s.answer(ingress.Answer{})
	s.finalize(ctx, 0, outcomeClientGone)
}

// answer gives ingress its final command. It is only ever called while ingress waits for one:
// after the dispatch, after a failed attempt, or while queued.
func (s *requestSupervisor) answer(a ingress.Answer) {
	if !s.answered {
		s.answered = true
		s.x.Send(ingress.Command{Answer: a})
	}
}

func (s *requestSupervisor) timing() ingress.Timing {
	return ingress.Timing{TTFT: s.ttft, FirstByte: s.firstByte}
}

func (s *requestSupervisor) routing() ingress.Routing {
	r := ingress.Routing{Attempts: s.attempt}
	if s.producer != nil {
		r.Producer = s.producer.Name
	}
	if s.consumer != nil {
		r.Consumer = s.consumer.Name
	}
	return r
}
