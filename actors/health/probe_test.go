package health

import (
	"testing"

	"github.com/narwhal-router/narwhal/transport/fault"
)

func TestJudgeProbe(t *testing.T) {
	const pre, dec = fault.PhasePrefill, fault.PhaseDecode
	failed := ProbeJudgement{Failed: true}
	partner := ProbeJudgement{PartnerFailed: true}
	for _, tc := range []struct {
		name string
		f    ProbeFault
		want ProbeJudgement
	}{
		{"a consumer's decode failed", ProbeFault{TargetIsConsumer: true, Leg: dec}, failed},
		{"a consumer's producer failed its prefill", ProbeFault{TargetIsConsumer: true, Leg: pre}, partner},
		{"a producer's prefill failed", ProbeFault{Leg: pre}, failed},
		{"a producer's consumer failed its decode", ProbeFault{Leg: dec}, partner},
		{"a same-worker probe blames its engine whichever leg", ProbeFault{Alone: true, Leg: dec}, failed},
		{"a local decode blames the consumer whichever leg", ProbeFault{TargetIsConsumer: true, Alone: true, Leg: pre}, failed},
		// Issue 33, defect 2: a producer whose descriptors fail its own endpoint rules fails its
		// check whatever its partner, and a consumer partnered with it is not held out: the
		// producer is ejected and another partner tried.
		{"a producer's own descriptors", ProbeFault{Leg: dec, DescriptorsInvalid: true}, ProbeJudgement{Failed: true, OwnDescriptors: true}},
		{"a consumer's partner's descriptors", ProbeFault{TargetIsConsumer: true, Leg: pre, DescriptorsInvalid: true},
			ProbeJudgement{PartnerFailed: true, RejectPartner: true}},
	} {
		if got := JudgeProbe(tc.f); got != tc.want {
			t.Errorf("%s: %+v, want %+v", tc.name, got, tc.want)
		}
	}
}
