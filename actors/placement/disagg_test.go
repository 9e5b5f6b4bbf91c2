package placement

import (
	"testing"
	"time"

	"github.com/narwhal-router/narwhal/config"
	"github.com/narwhal-router/narwhal/transport/fault"
	"github.com/narwhal-router/narwhal/transport/wire"
)

// The disaggregation rules, in docs/configuration.md's order, each with the fleet that shows
// it: where the attempt's legs go and which rule decided.
func TestPlaceAttemptRules(t *testing.T) {
	now := time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)
	base := config.FleetRuntime{Disaggregation: config.DisaggAuto, MinPromptTokens: 100, PrefillSaturation: 0.8,
		DecodeHeadroom: 0.5, MaxLocalPrompt: 1000, Placement: config.PlaceP2C, BlockWords: 16}
	long := wire.Prompt{N: 1, Tokens: 500, Words: 500}
	type fleet struct {
		p0Load, p0Max  int
		p0Out          bool
		p0Queued       int64 // prompt tokens p0 is computing for us
		d0LocalTokens  int64 // prompt tokens d0 is computing for us
		noProducer     bool  // the fleet has a consumer alone
		oneBoth        bool  // the fleet is one engine that does both
		measured       float64
		full, excluded []string
	}
	for _, tc := range []struct {
		name      string
		policy    string
		stall     time.Duration
		prompt    wire.Prompt
		fleet     fleet
		local     bool
		reason    string
		producer  string
		predicted bool
		why       Scarcity // with no placement
		phase     fault.Phase
	}{
		{name: "n > 1 decodes locally", prompt: wire.Prompt{N: 2, Tokens: 500, Words: 500}, local: true, reason: ReasonNGT1},
		{name: "policy always", policy: config.DisaggAlways, prompt: wire.Prompt{N: 1, Tokens: 5}, reason: ReasonPolicyAlways, producer: "p0"},
		{name: "policy never", policy: config.DisaggNever, prompt: long, local: true, reason: ReasonPolicyNever},
		{name: "a short prompt", prompt: wire.Prompt{N: 1, Tokens: 50, Words: 50}, local: true, reason: ReasonShortPrompt},
		{name: "a long prompt with producers free", prompt: long, reason: ReasonLongPrompt, producer: "p0"},
		{name: "every producer busy, the consumer idle", prompt: long, fleet: fleet{p0Load: 4, p0Max: 5},
			local: true, reason: ReasonPrefillSaturated},
		{name: "every producer busy, a prompt over max_local_prompt_tokens", prompt: wire.Prompt{N: 1, Tokens: 2000, Words: 2000},
			fleet: fleet{p0Load: 4, p0Max: 5}, reason: ReasonLongPrompt, producer: "p0"},
		{name: "every producer full: the consumer computes what it can afford", prompt: long, fleet: fleet{full: []string{"p0"}},
			local: true, reason: ReasonPrefillSaturated},
		{name: "every producer full, a prompt it cannot afford: the request waits", prompt: wire.Prompt{N: 1, Tokens: 2000, Words: 2000},
			fleet: fleet{full: []string{"p0"}}, reason: ReasonLongPrompt, why: NoRoom, phase: fault.PhasePrefill},
		{name: "no producer admitted", prompt: long, fleet: fleet{p0Out: true}, local: true, reason: ReasonNoProducer},
		{name: "no producer in the fleet", prompt: long, fleet: fleet{noProducer: true}, local: true, reason: ReasonNoProducer},
		{name: "the consumer is the only producer", prompt: long, fleet: fleet{oneBoth: true}, local: true, reason: ReasonNoProducer},
		{name: "policy always, no producer admitted", policy: config.DisaggAlways, prompt: long, fleet: fleet{p0Out: true},
			reason: ReasonPolicyAlways, why: NoAdmitted, phase: fault.PhasePrefill},
		{name: "no consumer left", prompt: long, fleet: fleet{excluded: []string{"d0"}}, why: NoAdmitted, phase: fault.PhaseDecode},
		// With a measured rate (1000 tokens/s) and a stall budget, a long prompt goes where its
		// first token is predicted sooner.
		{name: "predicted: the producer is idle", stall: 2 * time.Second, prompt: long, fleet: fleet{measured: 1000},
			reason: ReasonLongPrompt, producer: "p0", predicted: true},
		{name: "predicted: the producer's queue is long", stall: 2 * time.Second, prompt: long, fleet: fleet{measured: 1000, p0Queued: 10000},
			local: true, reason: ReasonPredictedTTFT, predicted: true},
		{name: "predicted sooner locally, but the consumer's streams would stall", stall: 2 * time.Second, prompt: long,
			fleet: fleet{measured: 1000, p0Queued: 10000, d0LocalTokens: 3000}, reason: ReasonLocalStall, producer: "p0", predicted: true},
		{name: "measured, but no stall budget: the saturation rule", prompt: long, fleet: fleet{measured: 1000, p0Queued: 10000},
			reason: ReasonLongPrompt, producer: "p0"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			rules := base
			if tc.policy != "" {
				rules.Disaggregation = tc.policy
			}
			rules.LocalStallBudget = tc.stall
			fl := tc.fleet
			p0 := view("p0", config.RolePrefill, int32(fl.p0Load), fl.p0Max)
			p0.Placeable.Store(!fl.p0Out)
			p0.PrefillTokens.Store(fl.p0Queued)
			d0 := view("d0", config.RoleDecode, 0, 0)
			d0.LocalTokens.Store(fl.d0LocalTokens)
			engines := []*Engine{p0, d0}
			switch {
			case fl.noProducer:
				engines = []*Engine{d0}
			case fl.oneBoth:
				engines = []*Engine{view("b0", config.RoleBoth, 0, 0)}
			}
			f := NewFleet(NewPrefixIndex(1<<10, nil), nil)
			f.Publish(engines)
			var rates Rates
			rates.Fleet.Observe(fl.measured)
			prompt := tc.prompt
			plan := f.Load().PlaceAttempt(AttemptAsk{Model: "m", Full: fl.full, Exclude: fl.excluded, Prompt: &prompt,
				Rules: &rules, Rates: &rates, Now: now})
			if tc.why != 0 {
				if plan.Placed() || plan.Why != tc.why || plan.Phase != tc.phase || plan.Decision.Reason != tc.reason {
					t.Fatalf("plan %+v, want no placement (%v on the %s leg) after %s", plan, tc.why, tc.phase, tc.reason)
				}
				return
			}
			producer := ""
			if plan.Producer != nil {
				producer = plan.Producer.Name
			}
			if !plan.Placed() || plan.Decision != (Decision{tc.local, tc.reason}) || producer != tc.producer {
				t.Fatalf("plan: %s %s via %q (placed %v), want %s %s via %q", plan.Decision.Name(), plan.Decision.Reason,
					producer, plan.Placed(), Decision{tc.local, tc.reason}.Name(), tc.reason, tc.producer)
			}
			if got := plan.Predicted != (Prediction{}); got != tc.predicted {
				t.Fatalf("predicted %+v, want a prediction: %v", plan.Predicted, tc.predicted)
			}
		})
	}
}

// The uncached part of a prompt scales its token estimate to the words past the matched blocks.
func TestUncached(t *testing.T) {
	rules := config.FleetRuntime{BlockWords: 16}
	for _, tc := range []struct {
		tokens, words, match, want int
	}{
		{400, 320, 0, 400},
		{400, 320, 10, 200},
		{400, 320, 20, 0},
		{400, 320, 30, 0},
		{400, 0, 3, 400},
	} {
		a := AttemptAsk{Prompt: &wire.Prompt{Tokens: tc.tokens, Words: tc.words}, Rules: &rules}
		if got := a.Uncached(tc.match); got != tc.want {
			t.Errorf("%d tokens, %d words, %d blocks matched: %d uncached, want %d", tc.tokens, tc.words, tc.match, got, tc.want)
		}
	}
}
