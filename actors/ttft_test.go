package actors

import (
	"math"
	"testing"
	"time"
)

func TestRateEWMA(t *testing.T) {
	var r rateEWMA
	if r.get() != 0 {
		t.Fatal("a fresh rate is measured")
	}
	for _, bad := range []float64{0, -5, math.NaN(), math.Inf(1)} {
		r.observe(bad)
	}
	if r.get() != 0 {
		t.Fatalf("meaningless samples set the rate to %v", r.get())
	}
	r.observe(1000)
	if r.get() != 1000 {
		t.Fatalf("the first sample sets the rate: %v", r.get())
	}
	// An outlier a hundred times faster moves it as a fourfold sample would.
	r.observe(100000)
	if want := 1000 + rateWeight*(4000-1000); math.Abs(r.get()-want) > 1e-9 {
		t.Fatalf("after an outlier the rate is %v, want %v", r.get(), want)
	}
	// Steady samples converge.
	for range 200 {
		r.observe(2000)
	}
	if math.Abs(r.get()-2000) > 1 {
		t.Fatalf("after steady samples of 2000 the rate is %v", r.get())
	}
}

func TestComputeLegObservesQueuedAndOwnWork(t *testing.T) {
	var rates prefillRates
	v := &engineView{Name: "p0"}
	at := time.Unix(100, 0)
	// Too little work to say anything: the engine's fixed cost per step would dominate.
	rates.observe(computeLeg{engine: v, queued: 5000, tokens: minRateSample - 1, at: at}, at.Add(time.Second))
	if rates.measuring() {
		t.Fatal("a leg under minRateSample tokens was measured")
	}
	rates.observe(computeLeg{engine: v, queued: 1500, tokens: 500, at: at}, at.Add(time.Second))
	if v.Rate.get() != 2000 || rates.fleet.get() != 2000 {
		t.Fatalf("rate %v, fleet %v: want the queued work and the leg's own over its time, 2000", v.Rate.get(), rates.fleet.get())
	}
	// An engine not measured yet borrows the fleet's rate.
	if got := rates.rateOf(&engineView{Name: "p1"}); got != 2000 {
		t.Fatalf("unmeasured engine's rate %v, want the fleet's 2000", got)
	}
}
