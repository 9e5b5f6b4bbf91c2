package placement

import (
	"fmt"
	"slices"
	"testing"
	"time"

	"github.com/narwhal-router/narwhal/config"
	"github.com/narwhal-router/narwhal/transport/fault"
)

// thousand is a fleet of n decode engines e0…e(n-1), each of load 0 and room for one request,
// with the views to set up the case.
func thousand(n int) (*testFleet, []*Engine) {
	vs := make([]*Engine, n)
	for i := range vs {
		vs[i] = view(fmt.Sprintf("e%d", i), config.RoleDecode, 0, 1)
	}
	return fleetOf(vs...), vs
}

// fill gives every engine but the ones at except its one request: they are full.
func fill(vs []*Engine, except ...int) {
	for i, v := range vs {
		if !slices.Contains(except, i) {
			v.Slots.Store(PackSlots(0, 1))
		}
	}
}

// When random draws keep missing (all but a few of a thousand engines full, out of placement
// or passed over), the walk that follows still finds the few, and with none says why exactly as
// a walk over the fleet would: the request is queued, refused with 503 or 404.
func TestPickAmongAThousandFindsTheFewAndSaysWhyNone(t *testing.T) {
	for _, policy := range []string{config.PlaceP2C, config.PlacePrefix, config.PlaceRoundRobin} {
		t.Run(policy, func(t *testing.T) {
			f, vs := thousand(1000)
			f.rules = &config.FleetRuntime{Placement: policy, LoadFactor: 1.25}
			blocks := []uint64{1, 2, 3}
			pick := func(avoid, full, exclude []string) Placed {
				return f.pickFor(Ask{Phase: fault.PhaseDecode, Model: "m", Blocks: blocks, Avoid: avoid, Full: full, Exclude: exclude}, nil)
			}
			fill(vs, 613)
			for range 50 {
				if p := pick(nil, nil, nil); p.Engine != vs[613] {
					t.Fatalf("the one engine with room: got %v (%v)", p.Engine, p.Why)
				}
			}
			if p := pick(nil, []string{"e613"}, nil); p.Engine != nil || p.Why != NoRoom {
				t.Fatalf("every engine full or refusing: got %v, %v; want queue", p.Engine, p.Why)
			}
			for _, v := range vs {
				v.Placeable.Store(false)
			}
			vs[5].Placeable.Store(true) // full: a queue, not a 503
			if p := pick(nil, nil, nil); p.Engine != nil || p.Why != NoRoom {
				t.Fatalf("one admitted engine, full: got %v, %v; want queue", p.Engine, p.Why)
			}
			if p := pick(nil, nil, []string{"e5"}); p.Engine != nil || p.Why != NoAdmitted {
				t.Fatalf("the admitted one excluded: got %v, %v; want 503", p.Engine, p.Why)
			}
			vs[5].Placeable.Store(false)
			if p := pick(nil, nil, nil); p.Engine != nil || p.Why != NoAdmitted {
				t.Fatalf("none admitted: got %v, %v; want 503", p.Engine, p.Why)
			}
			if p := f.pickFor(Ask{Phase: fault.PhaseDecode, Model: "other", Blocks: blocks}, nil); p.Engine != nil || p.Why != UnknownModel {
				t.Fatalf("a model nobody serves: got %v, %v; want 404", p.Engine, p.Why)
			}
		})
	}
}

// Of two engines with room among a thousand, power of two choices takes the less loaded every
// time: both are always the two drawn.
func TestPickAmongAThousandComparesTheTwoWithRoom(t *testing.T) {
	f, vs := thousand(1000)
	for _, v := range vs {
		v.MaxInflight = 5
	}
	fill(vs, 10, 990)
	for _, v := range vs {
		if v != vs[10] && v != vs[990] {
			v.Slots.Store(PackSlots(0, 5))
		}
	}
	vs[10].Slots.Store(PackSlots(0, 3))
	vs[990].Slots.Store(PackSlots(0, 1))
	for range 100 {
		if v, why := f.pick(fault.PhaseDecode, "m", nil, nil, nil); v != vs[990] {
			t.Fatalf("got %v (%v), want the less loaded of the two with room", v, why)
		}
	}
}

// A model only one engine of a thousand serves goes to that engine under every policy, and a
// model an engine learns after the snapshot was published is placed on it.
func TestPickAModelOneEngineOfAThousandServes(t *testing.T) {
	f, vs := thousand(1000)
	only := []string{"m", "rare"}
	vs[777].Models.Store(&only)
	for _, policy := range []string{config.PlaceP2C, config.PlacePrefix, config.PlaceRoundRobin} {
		f.rules = &config.FleetRuntime{Placement: policy, LoadFactor: 1.25}
		for range 20 {
			if p := f.pickFor(Ask{Phase: fault.PhaseDecode, Model: "rare", Blocks: []uint64{9}}, nil); p.Engine != vs[777] {
				t.Fatalf("%s: got %v (%v)", policy, p.Engine, p.Why)
			}
		}
	}
	f.rules = &config.FleetRuntime{Placement: config.PlaceP2C}
	if v, why := f.pick(fault.PhaseDecode, "late", nil, nil, nil); v != nil || why != UnknownModel {
		t.Fatalf("before any engine serves it: got %v, %v", v, why)
	}
	late := []string{"late"}
	vs[3].Models.Store(&late)
	if v, why := f.pick(fault.PhaseDecode, "late", nil, nil, nil); v != vs[3] {
		t.Fatalf("after e3 discovered it: got %v, %v", v, why)
	}
	if v, _ := f.pick(fault.PhaseDecode, "m", nil, nil, nil); v == vs[3] {
		t.Fatal("e3 no longer serves m, and was picked for it")
	}
}

// An avoided engine (the other leg's, a failed one) is used only when no other engine of the
// thousand can take the leg, and before an engine that has been backpressuring past the bound.
func TestPickAmongAThousandUsesTheAvoidedOnlyAsALastResort(t *testing.T) {
	for _, policy := range []string{config.PlaceP2C, config.PlacePrefix} {
		t.Run(policy, func(t *testing.T) {
			f, vs := thousand(1000)
			f.rules = &config.FleetRuntime{Placement: policy, LoadFactor: 1.25}
			pick := func() *Engine {
				return f.pickFor(Ask{Phase: fault.PhaseDecode, Model: "m", Blocks: []uint64{4}, Avoid: []string{"e1", "e2"}}, nil).Engine
			}
			fill(vs, 1, 2, 500)
			for range 50 {
				if v := pick(); v != vs[500] {
					t.Fatalf("got %v, want e500, the one not avoided", v)
				}
			}
			vs[500].Slots.Store(PackSlots(0, 1))
			vs[1].Pushback.PushedBack(time.Now(), "", config.BackpressureRuntime{Pass: time.Hour}, "e1", nil) // passed over: after the avoided ones
			for range 50 {
				if v := pick(); v != vs[2] {
					t.Fatalf("got %v, want e2, the avoided engine not passed over", v)
				}
			}
			vs[2].Slots.Store(PackSlots(0, 1))
			if v := pick(); v != vs[1] {
				t.Fatalf("got %v, want e1, the last engine with room", v)
			}
		})
	}
}

// Under prefix, the engine the index matched is chosen among a thousand while it is under the
// load bound, and passed over once its load would break the bound.
func TestPrefixPicksTheMatchedEngineOfAThousandUnderTheBound(t *testing.T) {
	f, vs := thousand(1000)
	for _, v := range vs {
		v.MaxInflight = 0
		v.Idx = f.Index.TakeSlot()
	}
	fl := NewFleet(f.Index, nil)
	fl.Publish(vs)
	f.Snapshot = fl.Load()
	f.rules = &config.FleetRuntime{Placement: config.PlacePrefix, LoadFactor: 1.25}
	blocks := chain(7, 8)
	f.Index.Record(blocks[:5], vs[421].Idx)
	f.Index.Record(blocks[:2], vs[422].Idx)
	for _, v := range vs {
		v.Slots.Store(PackSlots(0, 2))
	}
	for range 20 {
		if p := f.pickFor(Ask{Phase: fault.PhaseDecode, Model: "m", Blocks: blocks}, nil); p.Engine != vs[421] || p.Match != 5 {
			t.Fatalf("got %v match %d, want e421 with 5 blocks", p.Engine, p.Match)
		}
	}
	// The bound, 1.25 × (2,002 + 1) / 1,000 rounded up, is 3 requests: e421 at 4 is over it,
	// e422 at 2 under it, so the shorter match wins.
	vs[421].Slots.Store(PackSlots(0, 4))
	if p := f.pickFor(Ask{Phase: fault.PhaseDecode, Model: "m", Blocks: blocks}, nil); p.Engine != vs[422] || p.Match != 2 {
		t.Fatalf("got %v match %d, want e422 with 2 blocks", p.Engine, p.Match)
	}
	vs[422].Slots.Store(PackSlots(0, 4))
	for range 20 {
		if p := f.pickFor(Ask{Phase: fault.PhaseDecode, Model: "m", Blocks: blocks}, nil); p.Engine == vs[421] || p.Engine == vs[422] || p.Engine == nil {
			t.Fatalf("got %v, want an engine under the bound", p.Engine)
		}
	}
}
