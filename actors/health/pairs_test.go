package health

import (
	"reflect"
	"testing"
	"time"
)

// The pair breaker's rules, each as the events that show it and where the pair then stands:
// one failure opens it, a probe of the pair closes it, failed probes back off to the maximum,
// an inconclusive probe keeps the cadence, a pair open already keeps its cause, an engine that
// leaves takes its pairs with it.
func TestPairBreakers(t *testing.T) {
	cfg := recovery(0) // probes every 1 s, backing off to 4 s
	pq := PairKey{"p1", "c1"}
	type ev struct {
		at time.Duration
		do func(p *PairBreakers, now time.Time)
	}
	failed := func(cause string) func(*PairBreakers, time.Time) {
		return func(p *PairBreakers, now time.Time) { p.Failed(pq, now, cause, cfg) }
	}
	due := func(p *PairBreakers, now time.Time) { p.Due(now) }
	probeFail := func(p *PairBreakers, now time.Time) { p.ProbeFailed(pq, now, "still refused", cfg) }
	for _, tc := range []struct {
		name      string
		events    []ev
		state     PairState
		cause     string
		nextProbe time.Duration // from t0; -1: no breaker
	}{
		{"closed until a failure", nil, PairClosed, "", -1},
		{"one failure opens it", []ev{{0, failed("hash mismatch")}}, PairOpen, "hash mismatch", time.Second},
		{"a second failure keeps the first cause and cadence",
			[]ev{{0, failed("hash mismatch")}, {500 * time.Millisecond, failed("other")}}, PairOpen, "hash mismatch", time.Second},
		{"not due before its time", []ev{{0, failed("x")}, {999 * time.Millisecond, due}}, PairOpen, "x", time.Second},
		{"due: probing", []ev{{0, failed("x")}, {time.Second, due}}, PairProbing, "x", time.Second},
		{"a passed probe closes it", []ev{{0, failed("x")}, {time.Second, due},
			{time.Second, func(p *PairBreakers, _ time.Time) { p.ProbeSucceeded(pq) }}}, PairClosed, "", -1},
		{"a failed probe backs off", []ev{{0, failed("x")}, {time.Second, due}, {time.Second, probeFail}},
			PairOpen, "still refused", 3 * time.Second},
		{"back-off stops at the maximum", []ev{{0, failed("x")},
			{time.Second, due}, {time.Second, probeFail}, {3 * time.Second, due}, {3 * time.Second, probeFail},
			{7 * time.Second, due}, {7 * time.Second, probeFail}}, PairOpen, "still refused", 11 * time.Second},
		{"an inconclusive probe keeps the cadence", []ev{{0, failed("x")}, {time.Second, due},
			{time.Second, func(p *PairBreakers, now time.Time) { p.ProbeInconclusive(pq, now) }}}, PairOpen, "x", 2 * time.Second},
		{"a leaving engine takes its pairs", []ev{{0, failed("x")},
			{0, func(p *PairBreakers, _ time.Time) { p.Forget("c1") }}}, PairClosed, "", -1},
	} {
		p := NewPairBreakers()
		for _, e := range tc.events {
			e.do(p, t0.Add(e.at))
		}
		if got := p.State(pq); got != tc.state {
			t.Errorf("%s: state %s, want %s", tc.name, got, tc.state)
		}
		open := p.Open()
		if tc.nextProbe < 0 {
			if len(open) != 0 {
				t.Errorf("%s: open pairs %+v, want none", tc.name, open)
			}
			continue
		}
		if len(open) != 1 || open[0].Cause != tc.cause || !open[0].NextProbe.Equal(t0.Add(tc.nextProbe)) {
			t.Errorf("%s: open %+v, want cause %q, next probe at +%v", tc.name, open, tc.cause, tc.nextProbe)
		}
	}
}

// TestPairBreakersDue: only the open pairs whose time has come are due, in name order, each
// once; NextProbe is the earliest still waiting.
func TestPairBreakersDue(t *testing.T) {
	cfg := recovery(0)
	p := NewPairBreakers()
	p.Failed(PairKey{"p2", "c1"}, t0, "a", cfg)
	p.Failed(PairKey{"p1", "c2"}, t0, "b", cfg)
	p.Failed(PairKey{"p1", "c1"}, t0.Add(500*time.Millisecond), "c", cfg)
	if got := p.NextProbe(); !got.Equal(t0.Add(time.Second)) {
		t.Errorf("next probe %v", got)
	}
	want := []PairKey{{"p1", "c2"}, {"p2", "c1"}}
	if got := p.Due(t0.Add(time.Second)); !reflect.DeepEqual(got, want) {
		t.Errorf("due %v, want %v", got, want)
	}
	if got := p.Due(t0.Add(time.Second)); len(got) != 0 {
		t.Errorf("due again while probing: %v", got)
	}
	if got := p.NextProbe(); !got.Equal(t0.Add(1500 * time.Millisecond)) {
		t.Errorf("next probe %v, want the third pair's", got)
	}
}
