package placement

import (
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/narwhal-router/narwhal/config"
	"github.com/narwhal-router/narwhal/transport"
	"github.com/narwhal-router/narwhal/transport/fault"
	"github.com/narwhal-router/narwhal/transport/telemetry"
)

func view(name string, role config.Role, load int32, max int) *Engine {
	v := &Engine{Name: name, Role: role, MaxInflight: max}
	ms := []string{"m"}
	v.Models.Store(&ms)
	v.Slots.Store(PackSlots(uint32(load), 0))
	v.Placeable.Store(true)
	return v
}

// fleetOf is a fleet snapshot of vs, placed by power of two choices (zero rules: no prefix
// preference, fresh scrapes only when the test sets scrape_stale).
func fleetOf(vs ...*Engine) *testFleet {
	f := NewFleet(NewPrefixIndex(1<<10, nil), nil)
	f.Publish(vs)
	return &testFleet{Snapshot: f.Load(), rules: &config.FleetRuntime{}}
}

// testFleet is a snapshot and the rules its placements use.
type testFleet struct {
	*Snapshot
	rules *config.FleetRuntime
}

func (f *testFleet) pick(phase fault.Phase, model string, avoid, full, exclude []string) (*Engine, Scarcity) {
	return f.Snapshot.Pick(f.rules, phase, model, avoid, full, exclude)
}

func (f *testFleet) pickFor(a Ask, m *telemetry.Metrics) Placed {
	a.Rules = f.rules
	return f.Snapshot.Place(a)
}

func (f *testFleet) loadFor(v *Engine, a Ask, now time.Time) int {
	a.Rules = f.rules
	return f.Snapshot.LoadFor(v, a, now)
}

func TestPickPrefersTheLessLoadedOfTwo(t *testing.T) {
	f := fleetOf(view("a", config.RoleDecode, 5, 0), view("b", config.RoleDecode, 1, 0))
	for i := 0; i < 50; i++ {
		if v, _ := f.pick(fault.PhaseDecode, "m", nil, nil, nil); v.Name != "b" {
			t.Fatalf("picked %s", v.Name)
		}
	}
}

func TestPickBreaksTiesAtRandom(t *testing.T) {
	f := fleetOf(view("a", config.RoleDecode, 0, 0), view("b", config.RoleDecode, 0, 0))
	seen := map[string]int{}
	for i := 0; i < 200; i++ {
		v, _ := f.pick(fault.PhaseDecode, "m", nil, nil, nil)
		seen[v.Name]++
	}
	if seen["a"] < 50 || seen["b"] < 50 {
		t.Fatalf("ties not spread: %v", seen)
	}
}

func TestPickAvoidsWhileOthersCanServe(t *testing.T) {
	f := fleetOf(view("p", config.RoleBoth, 0, 0), view("d", config.RoleBoth, 9, 0))
	if v, _ := f.pick(fault.PhaseDecode, "m", []string{"p"}, nil, nil); v.Name != "d" {
		t.Fatalf("picked the avoided engine %s", v.Name)
	}
	single := fleetOf(view("p", config.RoleBoth, 0, 0))
	if v, _ := single.pick(fault.PhaseDecode, "m", []string{"p"}, nil, nil); v == nil || v.Name != "p" {
		t.Fatal("an avoided engine must still serve when it is the only one (same-worker decode)")
	}
}

func TestPickSaysWhyNothingWasFound(t *testing.T) {
	full := view("a", config.RoleDecode, 2, 2)
	ejectedView := view("b", config.RoleDecode, 0, 0)
	ejectedView.Placeable.Store(false)
	cases := []struct {
		name string
		f    *testFleet
		want Scarcity
	}{
		{"no engine serves the model", fleetOf(view("x", config.RolePrefill, 0, 0)), UnknownModel},
		{"engines serve it but none is admitted", fleetOf(ejectedView), NoAdmitted},
		{"admitted engines are full", fleetOf(full, ejectedView), NoRoom},
	}
	for _, tc := range cases {
		if v, why := tc.f.pick(fault.PhaseDecode, "m", nil, nil, nil); v != nil || why != tc.want {
			t.Errorf("%s: got %v, %v", tc.name, v, why)
		}
	}
	if v, why := fleetOf(view("a", config.RoleDecode, 0, 0)).pick(fault.PhaseDecode, "m", nil, []string{"a"}, nil); v != nil || why != NoRoom {
		t.Errorf("an engine that refused a slot: %v %v", v, why)
	}
	if v, why := fleetOf(view("a", config.RoleDecode, 0, 0)).pick(fault.PhaseDecode, "m", nil, nil, []string{"a"}); v != nil || why != NoAdmitted {
		t.Errorf("an excluded engine: %v %v", v, why)
	}
}

func TestReserveHonoursMaxInflightAndPlaceability(t *testing.T) {
	v := view("a", config.RoleBoth, 0, 2)
	if !v.Reserve(fault.PhasePrefill) || !v.Reserve(fault.PhaseDecode) {
		t.Fatal("two slots on an engine with max_inflight 2")
	}
	if v.Reserve(fault.PhaseDecode) {
		t.Fatal("a third slot past max_inflight")
	}
	if p, d := v.Reserved(); p != 1 || d != 1 {
		t.Fatalf("reserved %d/%d", p, d)
	}
	if !v.Release(fault.PhaseDecode) {
		t.Fatal("release did not report the engine was full")
	}
	v.Placeable.Store(false)
	if v.Reserve(fault.PhaseDecode) {
		t.Fatal("a slot on an engine out of placement")
	}
}

func TestReserveIsExactUnderContention(t *testing.T) {
	v := view("a", config.RoleDecode, 0, 100)
	var wg sync.WaitGroup
	var granted atomic.Int32
	for g := 0; g < 8; g++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := 0; i < 50; i++ {
				if v.Reserve(fault.PhaseDecode) {
					granted.Add(1)
				}
			}
		}()
	}
	wg.Wait()
	if granted.Load() != 100 || v.Load() != 100 {
		t.Fatalf("granted %d, load %d, want exactly max_inflight", granted.Load(), v.Load())
	}
}

// A scrape counts a producer's requests once: the router's own are weighed by their prompt
// tokens, and only requests beyond its reservations (placed by someone else) add a request's
// worth each. Counting every scraped request at the new prompt's size would send a long prompt
// to the producer with a few long prompts queued rather than the one with many short ones.
func TestPrefillLoadCountsScrapedRequestsOnce(t *testing.T) {
	now := time.Now()
	scraped := func(v *Engine, running, waiting int) {
		v.Scraped.Store(&LoadSample{At: now, Load: transport.EngineLoad{Running: running, Waiting: waiting}})
	}
	many := view("many", config.RolePrefill, 8, 0) // 8 short prompts of ours: 800 tokens
	many.PrefillTokens.Store(800)
	scraped(many, 1, 7)
	few := view("few", config.RolePrefill, 1, 0) // 1 long prompt of ours: 3000 tokens
	few.PrefillTokens.Store(3000)
	scraped(few, 1, 0)
	f := fleetOf(many, few)
	f.rules.ScrapeStale = time.Minute
	a := Ask{Phase: fault.PhasePrefill, Model: "m", Tokens: 3000}
	for i := 0; i < 20; i++ {
		if p := f.pickFor(a, nil); p.Engine != many {
			t.Fatalf("a 3000-token prompt went to %s (load %d) rather than the producer with 800 tokens queued (load %d)",
				p.Engine.Name, f.loadFor(few, a, now), f.loadFor(many, a, now))
		}
	}
	// Someone else's 5 requests on "many" count, a request's worth each.
	scraped(many, 1, 12)
	if got, want := f.loadFor(many, a, now), 800+5*3000; got != want {
		t.Fatalf("load with 5 foreign requests %d, want %d", got, want)
	}
	if p := f.pickFor(a, nil); p.Engine != few {
		t.Fatalf("picked %s, loaded by another router's requests", p.Engine.Name)
	}
}
