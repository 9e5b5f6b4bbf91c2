package placement

import (
	"time"

	"github.com/narwhal-router/narwhal/config"
	"github.com/narwhal-router/narwhal/transport/fault"
	"github.com/narwhal-router/narwhal/transport/wire"
)

// Disaggregation decisions and their reasons, as the metric and the access log name them
// (docs/configuration.md, disaggregation).
const (
	DecisionDisaggregated = "disaggregated"
	DecisionLocal         = "local"

	ReasonNGT1             = "n_gt_1"
	ReasonPolicyAlways     = "policy_always"
	ReasonPolicyNever      = "policy_never"
	ReasonShortPrompt      = "short_prompt"
	ReasonPrefixCached     = "prefix_cached"
	ReasonPrefillSaturated = "prefill_saturated"
	ReasonNoProducer       = "no_producer"
	ReasonLongPrompt       = "long_prompt"
	ReasonPredictedTTFT    = "predicted_ttft"
	ReasonLocalStall       = "local_stall"
)

// Decision is one attempt's disaggregation decision: local (the consumer computes the prompt
// itself) or disaggregated, and the rule that made it.
type Decision struct {
	Local  bool
	Reason string
}

// Name is the decision as the metric and the access log name it.
func (d Decision) Name() string {
	if d.Local {
		return DecisionLocal
	}
	return DecisionDisaggregated
}

// AttemptAsk is what an attempt of a prompted request asks of placement: a consumer, whether
// the prompt pays a prefill leg, and the producer if so.
type AttemptAsk struct {
	Model string
	// Avoid, Full and Exclude are as in Ask, for both legs (the consumer is avoided for the
	// prefill leg too).
	Avoid, Full, Exclude []string
	Prompt               *wire.Prompt
	// Rules are the request's disaggregation and placement settings; Rates what the router
	// measured of the fleet's prefill speed.
	Rules *config.FleetRuntime
	Rates *Rates
	// Now is the decision's clock.
	Now time.Time
}

// AttemptPlan is what placement decided for an attempt. With no Consumer, or with neither a
// Producer nor a local Decision, Why says why there is no placement and Phase for which leg.
type AttemptPlan struct {
	Consumer, Producer           *Engine
	ConsumerMatch, ProducerMatch int
	// ConsumerRank and ProducerRank are the ranks chosen inside engines of several
	// data-parallel ranks (Placed.Rank); nil otherwise.
	ConsumerRank, ProducerRank *Rank
	Decision                   Decision
	// Predicted are the predicted times to first token when the prediction decided.
	Predicted Prediction
	// ConsumerPrefix and ProducerPrefix are how the prefix index weighed in for each leg asked
	// (Placed.Prefix), for the prefix placement metric.
	ConsumerPrefix, ProducerPrefix string
	Why                            Scarcity
	Phase                          fault.Phase
}

// Placed says the attempt has its engines: a consumer and, unless it decodes locally, a producer.
func (p *AttemptPlan) Placed() bool {
	return p.Consumer != nil && (p.Producer != nil || p.Decision.Local)
}

// PlaceAttempt picks the attempt's consumer, decides whether its prompt pays a prefill leg
// (decide), and picks the producer if so. The reservations are the caller's: a refused slot
// goes on the next ask's Full list.
//
// Under disaggregation.policy auto, once the producer leg has been asked: when every producer
// is full the consumer computes a prompt it can afford rather than wait (prefill_saturated);
// a long prompt goes where its first token is predicted sooner (predict); with nowhere else to
// prefill (none admitted, or only the consumer itself) the consumer computes the prompt rather
// than fail or prefill twice (no_producer).
func (f *Snapshot) PlaceAttempt(a AttemptAsk) AttemptPlan {
	c := f.Place(Ask{Phase: fault.PhaseDecode, Model: a.Model, Avoid: a.Avoid, Full: a.Full, Exclude: a.Exclude,
		Blocks: a.Prompt.Blocks, Rules: a.Rules, Now: a.Now})
	out := AttemptPlan{ConsumerPrefix: c.Prefix}
	if c.Engine == nil {
		out.Why, out.Phase = c.Why, fault.PhaseDecode
		return out
	}
	cons := c.Engine
	out.Consumer, out.ConsumerMatch, out.ConsumerRank = cons, c.Match, c.Rank
	out.Decision = a.decide(f, cons, c.Match)
	if out.Decision.Local {
		return out
	}
	p := f.Place(Ask{Phase: fault.PhasePrefill, Model: a.Model, Avoid: append(a.Avoid[:len(a.Avoid):len(a.Avoid)], cons.Name),
		Full: a.Full, Exclude: f.withUnpairable(a.Exclude, cons), Blocks: a.Prompt.Blocks, Tokens: a.Prompt.Tokens, Rules: a.Rules, Now: a.Now})
	out.ProducerPrefix = p.Prefix
	switch auto := a.Rules.Disaggregation == config.DisaggAuto; {
	case auto && p.Engine == nil && p.Why == NoRoom && a.affordsWhileFull(cons, c.Match):
		out.Decision = Decision{true, ReasonPrefillSaturated}
	case auto && p.Engine != nil && p.Engine != cons && out.Decision.Reason == ReasonLongPrompt && a.predicting():
		if out.Decision, out.Predicted = a.predict(f, cons, c.Match, p); !out.Decision.Local {
			out.Producer, out.ProducerMatch, out.ProducerRank = p.Engine, p.Match, p.Rank
		}
	case auto && (p.Engine == cons || (p.Engine == nil && p.Why != NoRoom)):
		out.Decision = Decision{true, ReasonNoProducer}
	case p.Engine == nil:
		out.Why, out.Phase = p.Why, fault.PhasePrefill
	default:
		out.Producer, out.ProducerMatch, out.ProducerRank = p.Engine, p.Match, p.Rank
	}
	return out
}

// decide chooses between the prefill/decode path and same-worker decode on cons, which the
// prefix index says served match of the prompt's leading blocks. The rules and their order are
// docs/configuration.md's; the producer side (none other than cons can prefill) is decided
// when the producer is picked, and so is, once the router measures prefill rates, a long
// prompt's (predict): decide's long_prompt is then provisional.
func (a *AttemptAsk) decide(f *Snapshot, cons *Engine, match int) Decision {
	fr, p := a.Rules, a.Prompt
	switch {
	case p.N > 1:
		return Decision{true, ReasonNGT1}
	case fr.Disaggregation == config.DisaggAlways:
		return Decision{false, ReasonPolicyAlways}
	case fr.Disaggregation == config.DisaggNever:
		return Decision{true, ReasonPolicyNever}
	case p.Tokens < fr.MinPromptTokens:
		return Decision{true, ReasonShortPrompt}
	}
	rest := a.Uncached(match)
	switch {
	case rest < fr.MinPromptTokens:
		return Decision{true, ReasonPrefixCached}
	case !a.predicting() && rest <= fr.MaxLocalPrompt && a.prefillSaturated(f, cons):
		// Until the first rate is measured there is nothing to predict from: a fixed rule.
		return Decision{true, ReasonPrefillSaturated}
	}
	return Decision{false, ReasonLongPrompt}
}

// Uncached estimates the prompt tokens an engine matching match leading blocks would compute.
func (a *AttemptAsk) Uncached(match int) int {
	p := a.Prompt
	if match == 0 || p.Words == 0 {
		return p.Tokens
	}
	perBlock := p.PerBlock
	if perBlock == 0 {
		perBlock = a.Rules.BlockWords
	}
	if cached := match * perBlock; cached < p.Words {
		return p.Tokens * (p.Words - cached) / p.Words
	}
	return 0
}

// prefillSaturated says every admitted producer for the model (other than cons) is at least
// disaggregation.prefill_saturation busy while cons is under disaggregation.decode_headroom.
func (a *AttemptAsk) prefillSaturated(f *Snapshot, cons *Engine) bool {
	fr := a.Rules
	if cons.Busyness(a.Now, fr.ScrapeStale) >= fr.DecodeHeadroom {
		return false
	}
	seen := false
	for _, v := range f.Engines {
		if v == cons || !v.CanServe(fault.PhasePrefill) || !v.Serves(a.Model) || !v.Placeable.Load() {
			continue
		}
		seen = true
		if v.Busyness(a.Now, fr.ScrapeStale) < fr.PrefillSaturation {
			return false
		}
	}
	return seen
}
