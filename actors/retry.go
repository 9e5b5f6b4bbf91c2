package actors

import (
	"slices"
	"time"

	"github.com/asynkron/protoactor-go/actor"

	"github.com/narwhal-router/narwhal/transport/fault"
)

// fail decides, after an attempt failed before commit, between a fresh attempt and an error
// response: a retry only for a transient fault, before visible output, within
// recovery.max_attempts, the request deadline and the retry budget. A retry never lands on an
// engine that pushed back or that its breaker is about to take out, and prefers engines that
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
	if f.Retriable() && s.attempt < s.set.request.MaxAttempts && time.Now().Before(s.x.Deadline) {
		if s.set.budget.tryRetry() {
			s.env.metrics.Retry(f.Kind.String())
			switch {
			case f.Shuns(), s.breakerTakesOut(f):
				s.exclude = append(s.exclude, f.Engine)
			case !slices.Contains(s.avoid, f.Engine):
				s.avoid = append(s.avoid, f.Engine)
			}
			if f.Phase == fault.PhaseDecode && s.producer != nil && !slices.Contains(s.avoid, s.producer.Name) {
				// The decode may have failed reading the producer's handoff: prefer another pair.
				s.avoid = append(s.avoid, s.producer.Name)
			}
			s.startAttempt(ctx)
			return
		}
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
