package actors

import (
	"time"

	"github.com/narwhal-router/narwhal/actors/placement"
	"github.com/narwhal-router/narwhal/config"
	"github.com/narwhal-router/narwhal/transport/fault"
)

// Disaggregation decisions and their reasons, as the metric and the access log name them
// (docs/configuration.md, disaggregation).
const (
	decisionDisaggregated = "disaggregated"
	decisionLocal         = "local"

	reasonNGT1             = "n_gt_1"
	reasonPolicyAlways     = "policy_always"
	reasonPolicyNever      = "policy_never"
	reasonShortPrompt      = "short_prompt"
	reasonPrefixCached     = "prefix_cached"
	reasonPrefillSaturated = "prefill_saturated"
	reasonNoProducer       = "no_producer"
	reasonLongPrompt       = "long_prompt"
	reasonPredictedTTFT    = "predicted_ttft"
	reasonLocalStall       = "local_stall"
)

// decision is one attempt's disaggregation decision: local (the consumer computes the prompt
// itself) or disaggregated, and the rule that made it.
type decision struct {
	local  bool
	reason string
}

// name is the decision as the metric and the access log name it.
func (d decision) name() string {
	if d.local {
		return decisionLocal
	}
	return decisionDisaggregated
}

// countDecision counts the decision of the attempt just placed. A request's first attempt
// counts in disaggregation_decisions, so that counter holds one decision per request that
// reached an engine; a retry decides again (its producer may have failed, its prefix moved)
// and counts in disaggregation_retry_decisions instead. The access log carries the decision
// of the attempt that ended the request.
func (s *requestSupervisor) countDecision() {
	if s.attempt > 1 {
		s.env.metrics.DisaggregationRetryDecision(s.decision.name(), s.decision.reason)
		return
	}
	s.env.metrics.DisaggregationDecision(s.decision.name(), s.decision.reason)
}

// decide chooses between the prefill/decode path and same-worker decode on cons, which the
// prefix index says served match of the prompt's leading blocks. The rules and their order are
// docs/configuration.md's; the producer side (none other than cons can prefill) is decided
// when the producer is picked, and so is, once the router measures prefill rates, a long
// prompt's (predict, ttft.go): decide's long_prompt is then provisional.
func (s *requestSupervisor) decide(f *placement.Snapshot, cons *placement.Engine, match int) decision {
	fr := &s.set.fleet
	p := &s.prompt
	switch {
	case p.N > 1:
		return decision{true, reasonNGT1}
	case fr.Disaggregation == config.DisaggAlways:
		return decision{false, reasonPolicyAlways}
	case fr.Disaggregation == config.DisaggNever:
		return decision{true, reasonPolicyNever}
	case p.Tokens < fr.MinPromptTokens:
		return decision{true, reasonShortPrompt}
	}
	rest := s.uncachedOn(match)
	switch {
	case rest < fr.MinPromptTokens:
		return decision{true, reasonPrefixCached}
	case !s.predicting() && rest <= fr.MaxLocalPrompt && s.prefillSaturated(f, cons):
		// Until the first rate is measured there is nothing to predict from: a fixed rule.
		return decision{true, reasonPrefillSaturated}
	}
	return decision{false, reasonLongPrompt}
}

// uncachedOn estimates the prompt tokens an engine matching match leading blocks would compute.
func (s *requestSupervisor) uncachedOn(match int) int {
	p := &s.prompt
	if match == 0 || p.Words == 0 {
		return p.Tokens
	}
	return uncached(p.Tokens, p.Words, match*p.PerBlock)
}

// uncached scales the token estimate to the words past the cached ones.
func uncached(tokens, words, cachedWords int) int {
	if cachedWords >= words {
		return 0
	}
	return tokens * (words - cachedWords) / words
}

// prefillSaturated says every admitted producer for the model (other than cons) is at least
// disaggregation.prefill_saturation busy while cons is under disaggregation.decode_headroom.
func (s *requestSupervisor) prefillSaturated(f *placement.Snapshot, cons *placement.Engine) bool {
	fr := &s.set.fleet
	now := time.Now()
	if cons.Busyness(now, fr.ScrapeStale) >= fr.DecodeHeadroom {
		return false
	}
	seen := false
	for _, v := range f.Engines {
		if v == cons || !v.CanServe(fault.PhasePrefill) || !v.Serves(s.x.Body.Model) || !v.Placeable.Load() {
			continue
		}
		seen = true
		if v.Busyness(now, fr.ScrapeStale) < fr.PrefillSaturation {
			return false
		}
	}
	return seen
}
