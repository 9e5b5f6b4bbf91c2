package placement

import (
	"math"
	"sync/atomic"
	"time"
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
