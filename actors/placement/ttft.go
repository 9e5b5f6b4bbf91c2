package placement

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
// measurement the fixed saturation rule decides (disagg.go, decide).
//
// A rate is in estimated prompt tokens (wire.Prompt's estimate, the unit placement counts
// work in) per second: the same estimate is used to measure and to predict, so its error
// against the engine's tokenizer cancels.

// RateEWMA is a rate smoothed over the samples it is told, lock-free: supervisors observe and
// read it concurrently. A lost update between two observing supervisors loses one sample,
// which an average of many does not miss. Zero is "not measured yet".
type RateEWMA struct{ bits atomic.Uint64 }

// rateWeight is the share of the newest sample: about the last ten samples count.
const rateWeight = 0.1

// rateClamp bounds a sample to this factor either side of the current average, so one
// outlier (a prompt the engine found cached, a leg delayed by the network) moves it little.
const rateClamp = 4

func (r *RateEWMA) Get() float64 { return math.Float64frombits(r.bits.Load()) }

func (r *RateEWMA) Observe(sample float64) {
	if !(sample > 0) || math.IsInf(sample, 0) {
		return
	}
	cur := r.Get()
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

// Rates is what the router measured of the fleet's prefill speed: each engine's own
// rate (Engine.rate), the fleet-wide average that stands in for an engine not measured yet,
// and the handoff's tail — from the producer's answer to the consumer's first token (the KV
// pull and the consumer's first step).
// Writers: the request supervisors, at commit (Observe); placement reads it.
type Rates struct {
	Fleet RateEWMA
	// tail is seconds, smoothed like a rate.
	Tail RateEWMA
}

// rateOf is v's measured prefill rate, the fleet's where v has none yet; 0: nothing measured.
func (r *Rates) RateOf(v *Engine) float64 {
	if x := v.Rate.Get(); x > 0 {
		return x
	}
	return r.Fleet.Get()
}

// measuring says the router has measured a prefill rate.
func (r *Rates) Measuring() bool { return r.Fleet.Get() > 0 }

// ComputeLeg is the prompt work one attempt placed on the engine that computes its prompt (the
// producer, or the consumer of a local decode), kept to measure that engine's rate when the
// work is done: queued is the work the engine held for us when the attempt was placed, tokens
// the attempt's own.
type ComputeLeg struct {
	Engine         *Engine
	Queued, Tokens int
	At             time.Time
}

// observe learns engine's rate from a leg whose prompt was computed by done.
func (r *Rates) Observe(l ComputeLeg, done time.Time) {
	dt := done.Sub(l.At).Seconds()
	if l.Engine == nil || l.Tokens < minRateSample || dt <= 0 {
		return
	}
	sample := float64(l.Queued+l.Tokens) / dt
	l.Engine.Rate.Observe(sample)
	r.Fleet.Observe(sample)
}

// Prediction is one decision's predicted times to first token, kept for the access log: on the
// consumer alone and through the producer; zero when not predicted.
type Prediction struct {
	Local, Disaggregated time.Duration
}

// seconds converts a Prediction in seconds to a duration, saturating: a rate near zero makes
// the Prediction too long to represent, never negative.
func Seconds(s float64) time.Duration {
	if math.IsNaN(s) || s > float64(math.MaxInt64/int64(time.Second)) {
		return time.Duration(math.MaxInt64)
	}
	return time.Duration(s * float64(time.Second))
}

// predicting says the prediction decides long prompts: the router has measured a prefill rate
// and disaggregation.local_stall_budget_s is not 0 (which keeps the saturation rule).
func (a *AttemptAsk) predicting() bool {
	return a.Rules.LocalStallBudget > 0 && a.Rates.Measuring()
}

// predict decides, for a prompt long enough to pay a prefill leg, between the producer p picked
// and computing it on cons, and says what it predicted. It is called only while predicting.
func (a *AttemptAsk) predict(f *Snapshot, cons *Engine, consMatch int, p Placed) (Decision, Prediction) {
	rates := a.Rates
	prodRest := a.Uncached(p.Match)
	queued := f.LoadFor(p.Engine, Ask{Phase: fault.PhasePrefill, Tokens: a.Prompt.Tokens, Rules: a.Rules}, a.Now)
	pd := Seconds(float64(queued+prodRest)/rates.RateOf(p.Engine) + rates.Tail.Get())

	rest := a.Uncached(consMatch)
	local := a.localOn(cons, rest)
	// Computing the prompt holds up every stream decoding on the consumer for as long as it
	// takes: local pays that on top of its own wait, so a prompt goes local only when the
	// producer's queue would make it wait longer than computing it takes.
	hold := Seconds(float64(rest) / rates.RateOf(cons))
	predicted := Prediction{Local: local, Disaggregated: pd}
	switch {
	case local+hold >= pd:
		return Decision{false, ReasonLongPrompt}, predicted
	case !a.affordsLocal(cons, local):
		// Sooner on the consumer, but the streams decoding there would wait too long.
		return Decision{false, ReasonLocalStall}, predicted
	}
	return Decision{true, ReasonPredictedTTFT}, predicted
}

// affordsLocal says cons may compute a prompt whose first token, behind the local prompts it
// already computes for us, is predicted local from now: within the stall budget, and cons
// under disaggregation.decode_headroom.
func (a *AttemptAsk) affordsLocal(cons *Engine, local time.Duration) bool {
	return local <= a.Rules.LocalStallBudget && cons.Busyness(a.Now, a.Rules.ScrapeStale) < a.Rules.DecodeHeadroom
}

// affordsWhileFull says cons may compute the prompt, matching match leading blocks, while every
// producer is full: by the stall budget while predicting, by
// disaggregation.max_local_prompt_tokens otherwise.
func (a *AttemptAsk) affordsWhileFull(cons *Engine, match int) bool {
	rest := a.Uncached(match)
	if !a.predicting() {
		return rest <= a.Rules.MaxLocalPrompt
	}
	return a.affordsLocal(cons, a.localOn(cons, rest))
}

// localOn is the predicted time to the first token of rest prompt tokens computed on cons.
func (a *AttemptAsk) localOn(cons *Engine, rest int) time.Duration {
	return Seconds(float64(int(cons.LocalTokens.Load())+rest) / a.Rates.RateOf(cons))
}
