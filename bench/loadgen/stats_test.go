package loadgen

import (
	"testing"
	"time"
)

func TestPercentileNearestRank(t *testing.T) {
	s := []int64{1, 2, 3, 4, 5, 6, 7, 8, 9, 10}
	for q, want := range map[float64]int64{0.5: 5, 0.9: 9, 0.99: 10, 1: 10, 0.01: 1} {
		if got := Percentile(s, q); got != want {
			t.Errorf("p%v = %d, want %d", q*100, got, want)
		}
	}
	if Percentile(nil, 0.5) != 0 {
		t.Error("empty samples")
	}
}

func TestSummarizeDoesNotReorderItsInput(t *testing.T) {
	in := []int64{3000, 1000, 2000}
	s := Summarize(in)
	if in[0] != 3000 || s.P50 != 2*time.Millisecond || s.Max != 3*time.Millisecond || s.Mean != 2*time.Millisecond {
		t.Fatalf("%+v %v", s, in)
	}
}

func TestMergeAddsCountsAndSamples(t *testing.T) {
	a := Result{Arm: Routed, Sent: 2, OK: 1, Errors: map[string]int{"x": 1}, FirstByte: []int64{1}, Elapsed: time.Second}
	b := Result{Arm: Routed, Sent: 3, OK: 3, Errors: map[string]int{"x": 1, "y": 2}, FirstByte: []int64{2, 3}, Elapsed: time.Second,
		Faults: &FaultTally{Injected: map[string]int{"f": 2}, Consumed: map[string]int{"f": 1}, AfterCommit: map[string]bool{"f": true}}}
	a.Merge(&b)
	if a.Sent != 5 || a.OK != 4 || a.Errors["x"] != 2 || a.Errors["y"] != 2 || len(a.FirstByte) != 3 ||
		a.Elapsed != 2*time.Second || a.Faults.Injected["f"] != 2 || !a.Faults.AfterCommit["f"] {
		t.Fatalf("%+v", a)
	}
	if a.Rate() != 2 || a.ErrorCount() != 4 {
		t.Fatalf("rate %v errors %d", a.Rate(), a.ErrorCount())
	}
}
