package actors

import (
	"sync"
	"sync/atomic"
	"testing"

	"github.com/narwhal-router/narwhal/config"
	"github.com/narwhal-router/narwhal/transport/fault"
)

func view(name string, role config.Role, load int32, max int) *engineView {
	v := &engineView{name: name, role: role, maxInflight: max}
	ms := []string{"m"}
	v.models.Store(&ms)
	v.slots.Store(packSlots(uint32(load), 0))
	v.placeable.Store(true)
	return v
}

func fleetOf(vs ...*engineView) *fleet {
	f := &fleet{byName: map[string]*engineView{}}
	for _, v := range vs {
		f.engines = append(f.engines, v)
		f.byName[v.name] = v
	}
	return f
}

func TestPickPrefersTheLessLoadedOfTwo(t *testing.T) {
	f := fleetOf(view("a", config.RoleDecode, 5, 0), view("b", config.RoleDecode, 1, 0))
	for i := 0; i < 50; i++ {
		if v, _ := f.pick(fault.PhaseDecode, "m", nil, nil, nil); v.name != "b" {
			t.Fatalf("picked %s", v.name)
		}
	}
}

func TestPickBreaksTiesAtRandom(t *testing.T) {
	f := fleetOf(view("a", config.RoleDecode, 0, 0), view("b", config.RoleDecode, 0, 0))
	seen := map[string]int{}
	for i := 0; i < 200; i++ {
		v, _ := f.pick(fault.PhaseDecode, "m", nil, nil, nil)
		seen[v.name]++
	}
	if seen["a"] < 50 || seen["b"] < 50 {
		t.Fatalf("ties not spread: %v", seen)
	}
}

func TestPickAvoidsWhileOthersCanServe(t *testing.T) {
	f := fleetOf(view("p", config.RoleBoth, 0, 0), view("d", config.RoleBoth, 9, 0))
	if v, _ := f.pick(fault.PhaseDecode, "m", []string{"p"}, nil, nil); v.name != "d" {
		t.Fatalf("picked the avoided engine %s", v.name)
	}
	single := fleetOf(view("p", config.RoleBoth, 0, 0))
	if v, _ := single.pick(fault.PhaseDecode, "m", []string{"p"}, nil, nil); v == nil || v.name != "p" {
		t.Fatal("an avoided engine must still serve when it is the only one (same-worker decode)")
	}
}

func TestPickSaysWhyNothingWasFound(t *testing.T) {
	full := view("a", config.RoleDecode, 2, 2)
	ejectedView := view("b", config.RoleDecode, 0, 0)
	ejectedView.placeable.Store(false)
	cases := []struct {
		name string
		f    *fleet
		want scarcity
	}{
		{"no engine serves the model", fleetOf(view("x", config.RolePrefill, 0, 0)), unknownModel},
		{"engines serve it but none is admitted", fleetOf(ejectedView), noAdmitted},
		{"admitted engines are full", fleetOf(full, ejectedView), noRoom},
	}
	for _, tc := range cases {
		if v, why := tc.f.pick(fault.PhaseDecode, "m", nil, nil, nil); v != nil || why != tc.want {
			t.Errorf("%s: got %v, %v", tc.name, v, why)
		}
	}
	if v, why := fleetOf(view("a", config.RoleDecode, 0, 0)).pick(fault.PhaseDecode, "m", nil, []string{"a"}, nil); v != nil || why != noRoom {
		t.Errorf("an engine that refused a slot: %v %v", v, why)
	}
	if v, why := fleetOf(view("a", config.RoleDecode, 0, 0)).pick(fault.PhaseDecode, "m", nil, nil, []string{"a"}); v != nil || why != noAdmitted {
		t.Errorf("an excluded engine: %v %v", v, why)
	}
}

func TestReserveHonoursMaxInflightAndPlaceability(t *testing.T) {
	v := view("a", config.RoleBoth, 0, 2)
	if !v.reserve(fault.PhasePrefill) || !v.reserve(fault.PhaseDecode) {
		t.Fatal("two slots on an engine with max_inflight 2")
	}
	if v.reserve(fault.PhaseDecode) {
		t.Fatal("a third slot past max_inflight")
	}
	if p, d := v.reserved(); p != 1 || d != 1 {
		t.Fatalf("reserved %d/%d", p, d)
	}
	if !v.release(fault.PhaseDecode) {
		t.Fatal("release did not report the engine was full")
	}
	v.placeable.Store(false)
	if v.reserve(fault.PhaseDecode) {
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
				if v.reserve(fault.PhaseDecode) {
					granted.Add(1)
				}
			}
		}()
	}
	wg.Wait()
	if granted.Load() != 100 || v.load() != 100 {
		t.Fatalf("granted %d, load %d, want exactly max_inflight", granted.Load(), v.load())
	}
}
