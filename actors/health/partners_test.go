package health

import (
	"math/rand/v2"
	"slices"
	"testing"
)

func TestPartnersServingTheModelComeFirstEachGroupAtRandom(t *testing.T) {
	rnd := rand.New(rand.NewPCG(3, 5)).IntN
	serves := func(i int) bool { return i < 2 } // 0 and 1 serve the model; 2 does not
	first := map[int]int{}
	for range 400 {
		o := Partners(3, serves, rnd)
		if len(o) != 3 || o[2] != 2 || !slices.Contains(o[:2], 0) || !slices.Contains(o[:2], 1) {
			t.Fatalf("order %v: want 0 and 1 (serving the model) first, then 2", o)
		}
		first[o[0]]++
	}
	// The bad partner of issue 33 (defect 2) was first in fleet order and asked first every time.
	if first[0] < 150 || first[1] < 150 {
		t.Fatalf("first partner over 400 orders: %v, want each of the two about half the time", first)
	}
	if o := Partners(0, serves, rnd); len(o) != 0 {
		t.Fatalf("no candidates: %v", o)
	}
}
