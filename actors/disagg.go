package actors

import (
	"time"

	"github.com/narwhal-router/narwhal/actors/placement"
)

// The disaggregation decision and the time-to-first-token prediction are placement's
// (placement.Snapshot.PlaceAttempt); what the supervisor keeps is their bookkeeping: the
// decision's counters, the prompt work a local decode holds on its consumer, and the rates
// each committed attempt teaches.

// countDecision counts the decision of the attempt just placed. A request's first attempt
// counts in disaggregation_decisions, so that counter holds one decision per request that
// reached an engine; a retry decides again (its producer may have failed, its prefix moved)
// and counts in disaggregation_retry_decisions instead. The access log carries the decision
// of the attempt that ended the request.
func (s *requestSupervisor) countDecision() {
	if s.attempt > 1 {
		s.env.metrics.DisaggregationRetryDecision(s.decision.Name(), s.decision.Reason)
		return
	}
	s.env.metrics.DisaggregationDecision(s.decision.Name(), s.decision.Reason)
}

// holdLocalWork counts the prompt tokens a local decode placed on v will compute (its uncached
// part) in v.localTokens until its first token: the consumer's queue for the next decision.
func (s *requestSupervisor) holdLocalWork(v *placement.Engine, tokens int) {
	s.localHeld = int64(tokens)
	v.LocalTokens.Add(s.localHeld)
}

// dropLocalWork takes the attempt's local work off its consumer's queue, once.
func (s *requestSupervisor) dropLocalWork() {
	if s.localHeld != 0 && s.consumer != nil {
		s.consumer.LocalTokens.Add(-s.localHeld)
	}
	s.localHeld = 0
}

// measureCommit learns from a committed attempt: the computing engine's rate, and for a
// disaggregated attempt the handoff's tail.
func (s *requestSupervisor) measureCommit(prefillDone, firstToken time.Time) {
	if s.leg.Engine == nil {
		return
	}
	rates := &s.env.rates
	if s.producer != nil {
		if !prefillDone.IsZero() {
			rates.Observe(s.leg, prefillDone)
			if tail := firstToken.Sub(prefillDone).Seconds(); tail > 0 {
				rates.Tail.Observe(tail)
			}
		}
		return
	}
	rates.Observe(s.leg, firstToken)
}
