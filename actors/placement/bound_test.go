package placement

import (
	"fmt"
	"math/rand/v2"
	"testing"
	"time"

	"github.com/narwhal-router/narwhal/config"
	"github.com/narwhal-router/narwhal/transport/fault"
)

// At light load every producer is idle when a prompt arrives. The load bound must not leave
// them all over it (a prompt heavier than the mean load fits nowhere) and hand every prefill
// to the first engine in fleet order: with no match under the bound the choice is p2c, and
// ties go either way.
func TestLightLoadSpreadsPrefillsOverIdleProducers(t *testing.T) {
	now := time.Unix(1000, 0)
	for _, tc := range []struct {
		name string
		// shared says every producer holds the prompts' first block (a common system prompt):
		// equal matches, equal loads.
		shared bool
		tokens int
	}{
		{"no prefix held, long prompts", false, 2000},
		{"no prefix held, short prompts", false, 20},
		{"a prefix every producer holds", true, 2000},
	} {
		t.Run(tc.name, func(t *testing.T) {
			vs := []*Engine{view("p0", config.RolePrefill, 0, 0), view("p1", config.RolePrefill, 0, 0), view("p2", config.RolePrefill, 0, 0)}
			for i, v := range vs {
				v.Idx = i
			}
			x := NewPrefixIndex(1<<12, nil)
			rnd := rand.New(rand.NewPCG(7, 11))
			f := NewFleet(x, rnd.IntN)
			f.Publish(vs)
			rules := &config.FleetRuntime{Placement: config.PlacePrefix, LoadFactor: 1.25}
			if tc.shared {
				for _, v := range vs {
					x.Record([]uint64{42}, v.Idx)
				}
			}
			got := map[string]int{}
			const n = 300
			for i := range n {
				blocks := []uint64{uint64(1000 + i), uint64(5000 + i)}
				if tc.shared {
					blocks[0] = 42
				}
				p := f.Load().Place(Ask{Phase: fault.PhasePrefill, Model: "m", Blocks: blocks, Tokens: tc.tokens, Rules: rules, Now: now})
				if p.Engine == nil {
					t.Fatalf("prompt %d: no engine (%v)", i, p.Why)
				}
				got[p.Engine.Name]++
			}
			for _, v := range vs {
				if share := float64(got[v.Name]) / n; share < 0.20 || share > 0.47 {
					t.Errorf("%s took %d of %d prefills (%.0f%%), want 20–47%%: %v", v.Name, got[v.Name], n, 100*share, fmt.Sprint(got))
				}
			}
		})
	}
}

// The bound is load_factor × the candidates' mean load, on their load before the request:
// the least loaded is always under it.
func TestLoadBound(t *testing.T) {
	for _, tc := range []struct {
		factor      float64
		total, n    int
		want        int
		description string
	}{
		{1.25, 0, 3, 0, "idle: every engine (load 0) is under"},
		{1.25, 3, 3, 1, "one request each: those with one may take another"},
		{1.25, 3000, 3, 1250, "prompt tokens"},
		{2, 10, 4, 5, "a looser factor"},
	} {
		if got := loadBound(tc.factor, tc.total, tc.n); got != tc.want {
			t.Errorf("%s: loadBound(%v, %d, %d) = %d, want %d", tc.description, tc.factor, tc.total, tc.n, got, tc.want)
		}
	}
}
