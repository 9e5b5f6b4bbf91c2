package health

import "testing"

func TestProducerSuspect(t *testing.T) {
	in := func(c string) HandoffFailure[string] { return HandoffFailure[string]{Consumer: c} }
	out := func(c string) HandoffFailure[string] { return HandoffFailure[string]{Consumer: c, ConsumerOut: true} }
	for _, tc := range []struct {
		name     string
		failures []HandoffFailure[string]
		want     bool
	}{
		{"none", nil, false},
		{"one consumer, however often", []HandoffFailure[string]{in("d0"), in("d0"), in("d0")}, false},
		{"two consumers in placement", []HandoffFailure[string]{in("d0"), in("d2")}, true},
		// The sole producer is not blamed for d2's failures because d0, already ejected for its
		// own, failed with it too (issue 33, defect 4).
		{"one consumer already out", []HandoffFailure[string]{out("d0"), out("d0"), in("d2")}, false},
		{"both out", []HandoffFailure[string]{out("d0"), out("d2")}, false},
		{"a request that fails everywhere", []HandoffFailure[string]{in("d0"), {Consumer: "d2", FailsEverywhere: true}}, false},
		{"three, one out", []HandoffFailure[string]{out("d0"), in("d1"), in("d2")}, true},
	} {
		if got := ProducerSuspect(tc.failures); got != tc.want {
			t.Errorf("%s: ProducerSuspect = %v, want %v", tc.name, got, tc.want)
		}
	}
}
