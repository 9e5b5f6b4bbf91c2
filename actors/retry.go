package actors

import (
	"time"

	"github.com/asynkron/protoactor-go/actor"

	"github.com/narwhal-router/narwhal/actors/health"
	"github.com/narwhal-router/narwhal/transport/fault"
)

// fail decides, after an attempt failed before commit, between a fresh attempt and an error
// response (health.RetryAsk: a transient fault, before visible output, within
// recovery.max_attempts, the request deadline and the retry budget) and steers the retry off
// an engine that pushed back or that its breaker is about to take out, preferring engines that
// have not failed this request.
func (s *requestSupervisor) fail(ctx actor.Context, f *fault.Fault) {
	s.lastFault = f
	if s.gone {
		s.finishGone(ctx)
		return
	}
	if f.RouterSide() {
		s.respondFault(ctx, f)
		return
	}
	s.env.metrics.EngineFault(f.Engine, f.Phase.String(), f.Kind.String(), f.Reason)
	ask := health.RetryAsk{Retriable: f.Retriable(), Attempt: s.attempt, MaxAttempts: s.set.request.MaxAttempts,
		Deadline: s.x.Deadline, Engine: f.Engine, Shuns: f.Shuns(), Replan: f.Replans(), Replanned: s.replanned}
	switch ask.Decide(time.Now(), s.set.budget) {
	case health.Retry:
		s.replanned = s.replanned || ask.Replan
		s.env.metrics.Retry(f.Kind.String())
		ask.TakesOut = s.breakerTakesOut(f)
		if f.Phase == fault.PhaseDecode && s.producer != nil {
			ask.Producer = s.producer.Name
		}
		s.avoid, s.exclude = ask.Steer(s.avoid, s.exclude)
		s.startAttempt(ctx)
		return
	case health.BudgetExhausted:
		s.env.metrics.RetryBudgetExhausted()
	}
	s.respondFault(ctx, f)
}

// breakerTakesOut says the fault just seen would take its engine out of placement once counted
// (a quarantine, or the failure that completes the ejection streak), as the engine actor
// publishes it. The breaker hears of the failure when the request's fate is known (judge); the
// retry must not land there meanwhile.
func (s *requestSupervisor) breakerTakesOut(f *fault.Fault) bool {
	e := s.env.fleet.Load().Engine(f.Engine)
	return e != nil && f.CountsAgainstEngine() && e.TakesOut.Load()
}
