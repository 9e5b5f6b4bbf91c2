package placement

import (
	"math"
	"testing"
	"time"
)

func TestRateEWMA(t *testing.T) {
	var r RateEWMA
	if r.Get() != 0 {
		t.Fatal("a fresh rate is measured")
	}
	for _, bad := range []float64{0, -5, math.NaN(), math.Inf(1)} {
		r.Observe(bad)
	}
	if r.Get() != 0 {
		t.Fatalf("meaningless samples set the rate to %v", r.Get())
	}
	r.Observe(1000)
	if r.Get() != 1000 {
		t.Fatalf("the first sample sets the rate: %v", r.Get())
	}
	// An outlier a hundred times faster moves it as a fourfold sample would.
	r.Observe(100000)
	if want := 1000 + rateWeight*(4000-1000); math.Abs(r.Get()-want) > 1e-9 {
		t.Fatalf("after an outlier the rate is %v, want %v", r.Get(), want)
	}
	// Steady samples converge.
	for range 200 {
		r.Observe(2000)
	}
	if math.Abs(r.Get()-2000) > 1 {
		t.Fatalf("after steady samples of 2000 the rate is %v", r.Get())
	}
}

func TestComputeLegObservesQueuedAndOwnWork(t *testing.T) {
	var rates Rates
	v := &Engine{Name: "p0"}
	at := time.Unix(100, 0)
	// Too little work to say anything: the engine's fixed cost per step would dominate.
	rates.Observe(ComputeLeg{Engine: v, Queued: 5000, Tokens: minRateSample - 1, At: at}, at.Add(time.Second))
	if rates.Measuring() {
		t.Fatal("a leg under minRateSample tokens was measured")
	}
	rates.Observe(ComputeLeg{Engine: v, Queued: 1500, Tokens: 500, At: at}, at.Add(time.Second))
	if v.Rate.Get() != 2000 || rates.Fleet.Get() != 2000 {
		t.Fatalf("rate %v, fleet %v: want the queued work and the leg's own over its time, 2000", v.Rate.Get(), rates.Fleet.Get())
	}
	// An engine not measured yet borrows the fleet's rate.
	if got := rates.RateOf(&Engine{Name: "p1"}); got != 2000 {
		t.Fatalf("unmeasured engine's rate %v, want the fleet's 2000", got)
	}
}
