package scenarios

import (
	"math"
	"testing"
)

func TestFitLineRecoversInterceptAndSlope(t *testing.T) {
	var ps []cpuPoint
	for _, tokens := range []float64{1, 64, 1, 64} {
		ps = append(ps, cpuPoint{tokensPerRequest: tokens, usPerRequest: 50 + 4*tokens})
	}
	a, b := fitLine(ps)
	if math.Abs(a-50) > 1e-9 || math.Abs(b-4) > 1e-9 {
		t.Fatalf("intercept %v slope %v", a, b)
	}
	if a, b := fitLine(ps[:1]); a != 0 || b != 0 {
		t.Fatalf("one point cannot be fitted: %v %v", a, b)
	}
}

func TestSelect(t *testing.T) {
	all, err := Select("")
	if err != nil || len(all) != len(All) {
		t.Fatal(all, err)
	}
	two, err := Select("faults, overhead")
	if err != nil || len(two) != 2 || two[0].Name != "faults" || two[1].Name != "overhead" {
		t.Fatal(two, err)
	}
	if _, err := Select("nope"); err == nil {
		t.Fatal("an unknown scenario must be an error")
	}
}

func TestDecomposeSeparatesBackgroundFromMarginalCost(t *testing.T) {
	var ws []cpuWindow
	for _, w := range []struct{ rate, tokens float64 }{{300, 1}, {300, 64}, {150, 1}, {600, 1}} {
		wall, reqs := 6.0, w.rate*6
		ws = append(ws, cpuWindow{wall: wall, requests: reqs, tokens: reqs * w.tokens,
			cpuUS: 100000*wall + 400*reqs + 10*reqs*w.tokens})
	}
	bg, a, b, ok := decompose(ws)
	if !ok || math.Abs(bg-100000) > 1e-6 || math.Abs(a-400) > 1e-6 || math.Abs(b-10) > 1e-6 {
		t.Fatalf("background %v per request %v per token %v ok %v", bg, a, b, ok)
	}
	if _, _, _, ok := decompose(ws[:2]); ok {
		t.Fatal("two windows cannot fit three unknowns")
	}
}
