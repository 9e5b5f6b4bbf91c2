package placement

import (
	"testing"
	"time"

	"github.com/narwhal-router/narwhal/config"
	"github.com/narwhal-router/narwhal/transport"
	"github.com/narwhal-router/narwhal/transport/fault"
	"github.com/narwhal-router/narwhal/transport/wire"
)

// ranked gives v n ranks on prefix-index slots first, first+1, …; rank 0 shares v's slot.
func ranked(v *Engine, first, n int) *Engine {
	v.Idx = first
	rs := make([]*Rank, n)
	for i := range rs {
		rs[i] = &Rank{N: i, Idx: first + i}
	}
	v.SetRanks(rs)
	return v
}

func TestPlaceChoosesARankInsideTheEngine(t *testing.T) {
	prompt := []uint64{11, 12, 13}
	now := time.Unix(1000, 0)
	for _, tc := range []struct {
		name    string
		policy  string
		held    [4]int32
		waiting [4]int // scraped, fresh; nil scrape when all zero
		cached  int    // the rank whose slot holds the prompt; -1: none
		want    int
		match   int
	}{
		{"the rank holding the prompt", config.PlacePrefix, [4]int32{}, [4]int{}, 2, 2, 3},
		{"the holder over the load bound gives way to the least loaded", config.PlacePrefix, [4]int32{1, 1, 9, 0}, [4]int{}, 2, 3, 0},
		{"no rank holds it: the least loaded", config.PlacePrefix, [4]int32{3, 1, 2, 5}, [4]int{}, -1, 1, 0},
		{"p2c ignores the prompt: the least loaded", config.PlaceP2C, [4]int32{2, 2, 0, 2}, [4]int{}, 1, 2, 0},
		{"a rank's scraped queue counts", config.PlacePrefix, [4]int32{0, 1, 1, 0}, [4]int{0, 0, 0, 4}, 3, 0, 0},
	} {
		t.Run(tc.name, func(t *testing.T) {
			v := ranked(view("d", config.RoleDecode, 0, 0), 0, 4)
			for i, r := range v.Ranks() {
				r.Held.Store(tc.held[i])
			}
			if tc.waiting != [4]int{} {
				l := transport.EngineLoad{}
				for i, w := range tc.waiting {
					l.Ranks = append(l.Ranks, transport.RankLoad{Rank: i, Waiting: w})
				}
				v.Scraped.Store(&LoadSample{At: now, Load: l})
			}
			f := NewFleet(NewPrefixIndex(1<<10, nil), func(n int) int { return 0 })
			f.Publish([]*Engine{v})
			if tc.cached >= 0 {
				f.Index.Record(prompt, v.Ranks()[tc.cached].Idx)
			}
			rules := &config.FleetRuntime{Placement: tc.policy, LoadFactor: 1.25, ScrapeStale: time.Minute}
			p := f.Load().Place(Ask{Phase: fault.PhaseDecode, Model: "m", Blocks: prompt, Rules: rules, Now: now})
			if p.Engine != v || p.Rank == nil || p.Rank.N != tc.want || p.Match != tc.match {
				t.Fatalf("placed %v rank %+v match %d, want rank %d match %d", p.Engine != nil, p.Rank, p.Match, tc.want, tc.match)
			}
			if pin, ok := p.Rank.Pin().Pinned(); !ok || pin != tc.want {
				t.Fatalf("the leg pins rank %d (%v), want %d", pin, ok, tc.want)
			}
		})
	}
}

// A prompt cached on any rank of an engine draws the engine, and the plan names the rank and
// its slot, where the prompt is recorded next.
func TestARanksCacheDrawsItsEngine(t *testing.T) {
	prompt := []uint64{21, 22}
	a := view("a", config.RoleDecode, 0, 0)
	a.Idx = 0
	b := ranked(view("b", config.RoleDecode, 0, 0), 1, 3)
	f := NewFleet(NewPrefixIndex(1<<10, nil), nil)
	f.Publish([]*Engine{a, b})
	f.Index.Record(prompt, b.Ranks()[2].Idx)
	rules := &config.FleetRuntime{Placement: config.PlacePrefix, LoadFactor: 1.25, Disaggregation: config.DisaggNever}
	for range 20 {
		plan := f.Load().PlaceAttempt(AttemptAsk{Model: "m", Prompt: &wire.Prompt{N: 1, Tokens: 40, Words: 40, Blocks: prompt}, Rules: rules, Now: time.Unix(1, 0)})
		if plan.Consumer != b || plan.ConsumerRank != b.Ranks()[2] || plan.ConsumerMatch != 2 {
			t.Fatalf("placed on %s rank %+v match %d, want b's rank 2 with 2 blocks", plan.Consumer.Name, plan.ConsumerRank, plan.ConsumerMatch)
		}
		if SlotOf(plan.Consumer, plan.ConsumerRank) != 3 {
			t.Fatalf("recorded under slot %d, want rank 2's (3)", SlotOf(plan.Consumer, plan.ConsumerRank))
		}
	}
}

// On an idle engine, new prompts spread over its ranks, as vLLM's own balancer spreads them.
func TestIdleRanksShareNewPrompts(t *testing.T) {
	v := ranked(view("d", config.RoleDecode, 0, 0), 0, 4)
	f := NewFleet(NewPrefixIndex(1<<10, nil), nil)
	f.Publish([]*Engine{v})
	seen := map[int]int{}
	for i := range 400 {
		p := f.Load().Place(Ask{Phase: fault.PhaseDecode, Model: "m", Blocks: []uint64{uint64(1000 + i)},
			Rules: &config.FleetRuntime{Placement: config.PlacePrefix, LoadFactor: 1.25}})
		seen[p.Rank.N]++
	}
	for n := range 4 {
		if seen[n] < 50 {
			t.Fatalf("rank %d got %d of 400 new prompts: %v", n, seen[n], seen)
		}
	}
}

// An engine of one rank pins none: the request carries no header.
func TestOneRankPinsNone(t *testing.T) {
	v := view("d", config.RoleDecode, 0, 0)
	f := fleetOf(v)
	p := f.pickFor(Ask{Phase: fault.PhaseDecode, Model: "m"}, nil)
	if p.Rank != nil {
		t.Fatalf("rank %+v on an engine of one rank", p.Rank)
	}
	if _, ok := p.Rank.Pin().Pinned(); ok {
		t.Fatal("a nil rank pins one")
	}
}
