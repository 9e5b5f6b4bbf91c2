package actors

import (
	"math"
	"sync/atomic"
	"time"

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

// rateEWMA is a rate smoothed over the samples it is told, lock-free: supervisors observe and
// read it concurrently. A lost update between two observing supervisors loses one sample,
// which an average of many does not miss. Zero is "not measured yet".
type rateEWMA struct{ bits atomic.Uint64 }

// rateWeight is the share of the newest sample: about the last ten samples count.
const rateWeight = 0.1

// rateClamp bounds a sample to this factor either side of the current average, so one
// outlier (a prompt the engine found cached, a leg delayed by the network) moves it little.
const rateClamp = 4

func (r *rateEWMA) get() float64 { return math.Float64frombits(r.bits.Load()) }

func (r *rateEWMA) observe(sample float64) {
	if !(sample > 0) || math.IsInf(sample, 0) {
		return
	}
	cur := r.get()
	if cur == 0 {
		r.bits.Store(math.Float64bits(sample))
		return
	}
	sample = min(max(sample, cur/rateClamp), cur*rateClamp)
	r.bits.Store(math.Float64bits(cur + rateWeight*(sample-cur)))
}

// minRateSample is the least prompt work, in estimated tokens, a leg must have computed for
// its duration to say anything about an engine's rate: shorter prompts are dominated by the
// engine's fixed cost per step.
const minRateSample = 64

// prefillRates is what the router measured of the fleet's prefill speed: each engine's own
// rate (engineView.rate), the fleet-wide average that stands in for an engine not measured yet,
// and the handoff's tail — from the producer's answer to the consumer's first token (the KV
// pull and the consumer's first step).
type prefillRates struct {
	fleet rateEWMA
	// tail is seconds, smoothed like a rate.
	tail rateEWMA
}

// rateOf is v's measured prefill rate, the fleet's where v has none yet; 0: nothing measured.
func (r *prefillRates) rateOf(v *engineView) float64 {
	if x := v.Rate.get(); x > 0 {
		return x
	}
	return r.fleet.get()
}

// measuring says the router has measured a prefill rate.
func (r *prefillRates) measuring() bool { return r.fleet.get() > 0 }

// predicting says the prediction decides long prompts: the router has measured a prefill rate
// and disaggregation.local_stall_budget_s is not 0 (which keeps the saturation rule).
func (s *requestSupervisor) predicting() bool {
	return s.set.fleet.LocalStallBudget > 0 && s.env.rates.measuring()
}

// computeLeg is the prompt work one attempt placed on the engine that computes its prompt (the
// producer, or the consumer of a local decode), kept to measure that engine's rate when the
// work is done: queued is the work the engine held for us when the attempt was placed, tokens
// the attempt's own.
type computeLeg struct {
	engine         *engineView
	queued, tokens int
	at             time.Time
}

// observe learns engine's rate from a leg whose prompt was computed by done.
func (r *prefillRates) observe(l computeLeg, done time.Time) {
	dt := done.Sub(l.at).Seconds()
	if l.engine == nil || l.tokens < minRateSample || dt <= 0 {
		return
	}
	sample := float64(l.queued+l.tokens) / dt
	l.engine.Rate.observe(sample)
	r.fleet.observe(sample)
}

// prediction is one decision's predicted times to first token, kept for the access log: on the
// consumer alone and through the producer; zero when not predicted.
type prediction struct {
	local, disaggregated time.Duration
}

// predict decides, for a prompt long enough to pay a prefill leg, between the producer p picked
// and computing it on cons. It is called only while predicting.
func (s *requestSupervisor) predict(f *fleetSnapshot, cons *engineView, consMatch int, p placed) decision {
	fr := &s.set.fleet
	rates := &s.env.rates
	now := time.Now()
	prodRest := s.uncachedOn(p.Match)
	queued := f.LoadFor(p.Engine, ask{phase: fault.PhasePrefill, Tokens: s.prompt.Tokens, Rules: fr}, now)
	pd := seconds(float64(queued+prodRest)/rates.rateOf(p.Engine) + rates.tail.get())

	rest := s.uncachedOn(consMatch)
	local := s.localOn(cons, rest)
	// Computing the prompt holds up every stream decoding on the consumer for as long as it
	// takes: local pays that on top of its own wait, so a prompt goes local only when the
	// producer's queue would make it wait longer than computing it takes.
	hold := seconds(float64(rest) / rates.rateOf(cons))
	s.predicted = prediction{local: local, disaggregated: pd}
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
func (s *requestSupervisor) affordsLocal(cons *engineView, local time.Duration, now time.Time) bool {
	fr := &s.set.fleet
	return local <= fr.LocalStallBudget && cons.busyness(now, fr.ScrapeStale) < fr.DecodeHeadroom
}

// affordsWhileFull says cons may compute the prompt, matching match leading blocks, while every
// producer is full: by the stall budget while predicting, by
// disaggregation.max_local_prompt_tokens otherwise.
func (s *requestSupervisor) affordsWhileFull(cons *engineView, match int) bool {
	rest := s.uncachedOn(match)
	if !s.predicting() {
		return rest <= s.set.fleet.MaxLocalPrompt
	}
	return s.affordsLocal(cons, s.localOn(cons, rest), time.Now())
}

// localOn is the predicted time to the first token of rest prompt tokens computed on cons.
func (s *requestSupervisor) localOn(cons *engineView, rest int) time.Duration {
	return seconds(float64(int(cons.LocalTokens.Load())+rest) / s.env.rates.rateOf(cons))
}

// seconds converts a prediction in seconds to a duration, saturating: a rate near zero makes
// the prediction too long to represent, never negative.
func seconds(s float64) time.Duration {
	if math.IsNaN(s) || s > float64(math.MaxInt64/int64(time.Second)) {
		return time.Duration(math.MaxInt64)
	}
	return time.Duration(s * float64(time.Second))
}

// holdLocalWork counts the prompt tokens a local decode placed on v will compute (its uncached
// part) in v.localTokens until its first token: the consumer's queue for the next decision.
func (s *requestSupervisor) holdLocalWork(v *engineView, tokens int) {
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
	if s.leg.engine == nil {
		return
	}
	rates := &s.env.rates
	if s.producer != nil {
		if !prefillDone.IsZero() {
			rates.observe(s.leg, prefillDone)
			if tail := firstToken.Sub(prefillDone).Seconds(); tail > 0 {
				rates.tail.observe(tail)
			}
		}
		return
	}
	rates.observe(s.leg, firstToken)
}
