package scenarios

import (
	"fmt"
	"math"
	"slices"
	"testing"
	"time"
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

func TestArmOrderPutsEveryArmInEveryPosition(t *testing.T) {
	if got := fmt.Sprint(armOrder([]string{"D", "R"}, 0), armOrder([]string{"D", "R"}, 1)); got != "[D R] [R D]" {
		t.Fatalf("two arms are ABBA: %s", got)
	}
	for _, arms := range [][]string{{"D", "R", "P"}, {"D", "R", "P", "B"}} {
		// Over as many rounds as arms, each arm takes each position once; and the order
		// repeats with that period, so 12 rounds hold every position equally often.
		seen := map[string]map[int]bool{}
		for round := range len(arms) {
			order := armOrder(arms, round)
			if len(order) != len(arms) {
				t.Fatalf("round %d: %v", round, order)
			}
			for pos, a := range order {
				if seen[a] == nil {
					seen[a] = map[int]bool{}
				}
				seen[a][pos] = true
			}
			if again := armOrder(arms, round+len(arms)); !slices.Equal(again, order) {
				t.Fatalf("round %d: %v, then %v", round, order, again)
			}
		}
		for _, a := range arms {
			if len(seen[a]) != len(arms) {
				t.Fatalf("%d arms: %s took positions %v", len(arms), a, seen[a])
			}
		}
	}
	if got := fmt.Sprint(armOrder([]string{"D", "R", "P", "B"}, 1)); got != "[R P B D]" {
		t.Fatalf("the rotation moves the first arm last: %s", got)
	}
}

func TestBaselineFiguresAreNullWithoutABaseline(t *testing.T) {
	router := build{cpuReq: 300, cpuTok: 11, allocReq: 90, allocTok: 0.1}
	got := baselineFigures(router, nil)
	if len(got) != len(baselineKeys) {
		t.Fatalf("%d keys, want %d: %v", len(got), len(baselineKeys), got)
	}
	for _, k := range baselineKeys {
		if v, ok := got[k]; !ok || v != nil {
			t.Fatalf("%s: %v (present %v), want null", k, v, ok)
		}
	}

	base := build{cpuReq: 250, cpuTok: 10, allocReq: 100, allocTok: 0.2, cpuPer32Tok: 600,
		addedP50: 1500 * time.Microsecond, addedP99: 3 * time.Millisecond}
	got = baselineFigures(router, &base)
	want := map[string]float64{
		"baseline_cpu_us_per_request": 250, "baseline_cpu_us_per_token": 10,
		"baseline_allocs_per_request": 100, "baseline_allocs_per_token": 0.2,
		"baseline_cpu_us_per_32tok_request": 600,
		"baseline_added_first_byte_p50_ms":  1.5, "baseline_added_first_byte_p99_ms": 3,
		"router_over_baseline_per_request": 1.2, "router_over_baseline_per_token": 1.1,
		"router_over_baseline_allocs_per_request": 0.9,
	}
	for _, k := range baselineKeys {
		v, ok := got[k].(float64)
		if !ok || math.Abs(v-want[k]) > 1e-9 {
			t.Fatalf("%s: %v, want %v", k, got[k], want[k])
		}
	}

	// A baseline fit that came out at 0 or below has no ratio: 0 would pass for "no dearer".
	base.cpuTok, base.allocReq = 0, -1
	got = baselineFigures(router, &base)
	if got["router_over_baseline_per_token"] != nil || got["router_over_baseline_allocs_per_request"] != nil ||
		got["router_over_baseline_per_request"] == nil {
		t.Fatalf("%v", got)
	}
}
