package goodput

import (
	"math"
	"strings"
	"testing"
	"time"
)

const ms = time.Millisecond

func TestTPOTIsTheGapAfterTheFirstToken(t *testing.T) {
	s := Sample{OK: true, TTFT: 100 * ms, E2E: 100*ms + 9*20*ms, Tokens: 10}
	if v, ok := s.TPOT(); !ok || v != 20*ms {
		t.Errorf("TPOT %v %v, want 20ms", v, ok)
	}
	for _, s := range []Sample{{OK: true, TTFT: ms, E2E: ms, Tokens: 1}, {OK: false, Tokens: 10, E2E: time.Second}} {
		if _, ok := s.TPOT(); ok {
			t.Errorf("%+v has a TPOT", s)
		}
	}
}

func TestSLOMetNeedsBothAndASuccess(t *testing.T) {
	slo := SLO{TTFT: 200 * ms, TPOT: 30 * ms}
	cases := []struct {
		name string
		s    Sample
		want bool
	}{
		{"both met", Sample{OK: true, TTFT: 150 * ms, E2E: 150*ms + 4*25*ms, Tokens: 5}, true},
		{"TTFT exactly at the SLO", Sample{OK: true, TTFT: 200 * ms, E2E: 200*ms + 30*ms, Tokens: 2}, true},
		{"TTFT missed", Sample{OK: true, TTFT: 201 * ms, E2E: time.Second, Tokens: 50}, false},
		{"TPOT missed", Sample{OK: true, TTFT: 50 * ms, E2E: 50*ms + 4*31*ms, Tokens: 5}, false},
		{"one token: TTFT alone", Sample{OK: true, TTFT: 50 * ms, E2E: 50 * ms, Tokens: 1}, true},
		{"failed", Sample{OK: false, TTFT: ms, E2E: ms, Tokens: 5}, false},
	}
	for _, c := range cases {
		if got := slo.Met(c.s); got != c.want {
			t.Errorf("%s: Met = %v", c.name, got)
		}
	}
	var all []Sample
	for _, c := range cases {
		all = append(all, c.s)
	}
	if got := slo.Attainment(all); got != 3.0/6 {
		t.Errorf("attainment %v, want 0.5", got)
	}
	if got := slo.Attainment(nil); got != 0 {
		t.Errorf("attainment of nothing %v", got)
	}
	if !strings.Contains(slo.String(), "200ms") || !strings.Contains(slo.String(), "30ms") {
		t.Errorf("%q", slo)
	}
}

func TestPercentileIsNearestRank(t *testing.T) {
	var v []time.Duration
	for i := 1; i <= 100; i++ {
		v = append(v, time.Duration(i)*ms)
	}
	for q, want := range map[float64]time.Duration{0.5: 50 * ms, 0.9: 90 * ms, 0.99: 99 * ms, 1: 100 * ms, 0.001: ms} {
		if got := Percentile(v, q); got != want {
			t.Errorf("p%v = %v, want %v", q*100, got, want)
		}
	}
	if got := Percentile(v[:10], 0.99); got != 10*ms {
		t.Errorf("p99 of 10 = %v, want the largest", got)
	}
	if Percentile(nil, 0.5) != 0 {
		t.Error("percentile of nothing")
	}
}

// A cut-off request's wait counts in the TTFT tail (a lower bound), a failed one's not.
func TestLatenciesKeepCutOffsAndSkipFailures(t *testing.T) {
	ttft, tpot := Latencies([]Sample{
		{OK: true, TTFT: 30 * ms, E2E: 50 * ms, Tokens: 3},
		{OK: false, TTFT: ms},
		{OK: false, CutOff: true, TTFT: 8 * time.Second},
		{OK: true, TTFT: 10 * ms, E2E: 10 * ms, Tokens: 1},
	})
	if len(ttft) != 3 || ttft[0] != 10*ms || ttft[1] != 30*ms || ttft[2] != 8*time.Second || len(tpot) != 1 || tpot[0] != 10*ms {
		t.Errorf("ttft %v tpot %v", ttft, tpot)
	}
	if (SLO{TTFT: time.Hour, TPOT: time.Hour}).Met(Sample{CutOff: true, TTFT: ms}) {
		t.Error("a cut-off request met the SLO")
	}
}

func TestGoodputInterpolatesAtTheKnee(t *testing.T) {
	// 0.98 at 20/s, 0.80 at 30/s: the line meets 0.9 at 20 + (0.08/0.18) × 10.
	pts := []Point{{30, 0.80}, {10, 1}, {20, 0.98}, {40, 0.95}} // a noisy point above the knee
	rps, how := Goodput(pts, 0.9)
	if how != Interpolated || math.Abs(rps-(20+0.08/0.18*10)) > 1e-9 {
		t.Errorf("goodput %v (%s)", rps, how)
	}
	if rps, how := Goodput([]Point{{10, 1}, {20, 0.95}}, 0.9); how != AtLeast || rps != 20 {
		t.Errorf("every rate met: %v (%s)", rps, how)
	}
	if rps, how := Goodput([]Point{{10, 0.5}, {20, 0.2}}, 0.9); how != Below || rps != 0 {
		t.Errorf("none met: %v (%s)", rps, how)
	}
	if rps, how := Goodput(nil, 0.9); how != Below || rps != 0 {
		t.Errorf("no sweep: %v (%s)", rps, how)
	}
	if rps, how := Goodput([]Point{{10, 0.9}, {20, 0.9}, {30, 0.0}}, 0.9); how != Interpolated || rps != 20 {
		t.Errorf("exactly at the target: %v (%s)", rps, how)
	}
}

func TestKneeBracketsTheFirstMiss(t *testing.T) {
	lo, hi, ok := Knee([]Point{{30, 0.80}, {10, 1}, {20, 0.98}, {40, 0.95}}, 0.9)
	if !ok || lo.Rate != 20 || hi.Rate != 30 {
		t.Errorf("knee %v %v %v, want 20 and 30", lo, hi, ok)
	}
	if lo, _, ok := Knee([]Point{{10, 1}, {20, 0.95}}, 0.9); ok || lo.Rate != 20 {
		t.Errorf("no miss: %v %v", lo, ok)
	}
	if lo, hi, ok := Knee([]Point{{10, 0.5}}, 0.9); ok || lo.Rate != 0 || hi.Rate != 0 {
		t.Errorf("all missed: %v %v %v", lo, hi, ok)
	}
}

func TestScaleArrivalsKeepsTheShapeAtTheRate(t *testing.T) {
	at := []time.Duration{5 * time.Second, 6 * time.Second, 6 * time.Second, 9 * time.Second} // 3 gaps over 4 s: 0.75/s
	got, err := ScaleArrivals(at, 3)
	if err != nil {
		t.Fatal(err)
	}
	want := []time.Duration{0, 250 * ms, 250 * ms, time.Second} // 3 gaps over 1 s
	for i := range want {
		if got[i] != want[i] {
			t.Fatalf("scaled %v, want %v", got, want)
		}
	}
	for _, bad := range [][]time.Duration{{time.Second}, {time.Second, time.Second}} {
		if _, err := ScaleArrivals(bad, 3); err == nil {
			t.Errorf("%v was scaled", bad)
		}
	}
	if _, err := ScaleArrivals(at, 0); err == nil {
		t.Error("rate 0 was accepted")
	}
}

func TestRatesAreEvenlySpaced(t *testing.T) {
	r := Rates(10, 40, 4)
	if len(r) != 4 || r[0] != 10 || r[1] != 20 || r[3] != 40 {
		t.Errorf("%v", r)
	}
	if r := Rates(7, 9, 1); len(r) != 1 || r[0] != 7 {
		t.Errorf("%v", r)
	}
}
