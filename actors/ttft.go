package actors

import (
	"time"

	"github.com/narwhal-router/narwhal/actors/placement"
	"github.com/narwhal-router/narwhal/transport/fault"
)

// Under disaggregation.policy auto, a prompt long enough to be worth a prefill leg goes where
// its first token is predicted to come sooner: on a producer, behind what that producer has
// queued, then the handoff; or on the consumer itself, behind the prompts it is already
// computing for us — as long as what the consumer has queued stays within
// disaggregation.local_stall_budget_s, since every stream decoding there waits while it
// computes. The predictions come from rates the router measures on its own requests, so they
// hold for whatever hardware, model and batch sizes the engines run; until the first
// measurement the fixed saturation rule decides (disagg.go).
//
// A rate is in estimated prompt tokens (wire.Prompt's estimate, the unit placement counts
// work in) per second: the same estimate is used to measure and to predict, so its error
// against the engine's tokenizer cancels.

// predicting says the prediction decides long prompts: the router has measured a prefill rate
// and disaggregation.local_stall_budget_s is not 0 (which keeps the saturation rule).
func (s *requestSupervisor) predicting() bool {
	return s.set.fleet.LocalStallBudget > 0 && s.env.rates.Measuring()
}

// predict decides, for a prompt long enough to pay a prefill leg, between the producer p picked
// and computing it on cons. It is called only while predicting.
func (s *requestSupervisor) predict(f *placement.Snapshot, cons *placement.Engine, consMatch int, p placement.Placed) decision {
	fr := &s.set.fleet
	rates := &s.env.rates
	now := time.Now()
	prodRest := s.uncachedOn(p.Match)
	queued := f.LoadFor(p.Engine, placement.Ask{Phase: fault.PhasePrefill, Tokens: s.prompt.Tokens, Rules: fr}, now)
	pd := placement.Seconds(float64(queued+prodRest)/rates.RateOf(p.Engine) + rates.Tail.Get())

	rest := s.uncachedOn(consMatch)
	local := s.localOn(cons, rest)
	// Computing the prompt holds up every stream decoding on the consumer for as long as it
	// takes: local pays that on top of its own wait, so a prompt goes local only when the
	// producer's queue would make it wait longer than computing it takes.
	hold := placement.Seconds(float64(rest) / rates.RateOf(cons))
	s.predicted = placement.Prediction{Local: local, Disaggregated: pd}
	switch {
	case local+hold >= pd:
		return decision{false, reasonLongPrompt}
	case !s.affordsLocal(cons, local, now):
		// Sooner on the consumer, but the streams decoding there would wait too long.
		return decision{false, reasonLocalStall}
	}
	return decision{true, reasonPredictedTTFT}
}

// affordsLocal says cons may compute a prompt whose first token, behind the local prompts it
// already computes for us, is predicted local from now: within the stall budget, and cons
// under disaggregation.decode_headroom.
func (s *requestSupervisor) affordsLocal(cons *placement.Engine, local time.Duration, now time.Time) bool {
	fr := &s.set.fleet
	return local <= fr.LocalStallBudget && cons.Busyness(now, fr.ScrapeStale) < fr.DecodeHeadroom
}

// affordsWhileFull says cons may compute the prompt, matching match leading blocks, while every
// producer is full: by the stall budget while predicting, by
// disaggregation.max_local_prompt_tokens otherwise.
func (s *requestSupervisor) affordsWhileFull(cons *placement.Engine, match int) bool {
	rest := s.uncachedOn(match)
	if !s.predicting() {
		return rest <= s.set.fleet.MaxLocalPrompt
	}
	return s.affordsLocal(cons, s.localOn(cons, rest), time.Now())
}

// localOn is the predicted time to the first token of rest prompt tokens computed on cons.
func (s *requestSupervisor) localOn(cons *placement.Engine, rest int) time.Duration {
	return placement.Seconds(float64(int(cons.LocalTokens.Load())+rest) / s.env.rates.RateOf(cons))
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
