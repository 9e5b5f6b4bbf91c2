package actors

import (
	"github.com/narwhal-router/narwhal/actors/health"
	"github.com/narwhal-router/narwhal/actors/placement"
	"github.com/narwhal-router/narwhal/transport/fault"
)

// stateTally counts the pool's members by breaker state, as the pool last heard it, and per
// phase the members able to serve it and how many of those are ejected or probing. It is what
// countStates reports and what checkWaves tests first, kept as each change arrives so that
// neither walks the fleet on every change: with thousands of engines joining or failing at
// once (a reload, a discovery burst) a walk per change is quadratic. Its one writer is the
// pool actor.
type stateTally struct {
	byState        map[string]int
	servable, down [2]int // indexed by fault.Phase
}

// move records v going from state from to state to; from "" adds v, to "" removes it.
func (t *stateTally) move(v *placement.Engine, from, to string) {
	if t.byState == nil {
		t.byState = map[string]int{}
	}
	t.count(v, from, -1)
	t.count(v, to, +1)
}

func (t *stateTally) count(v *placement.Engine, state string, n int) {
	if state == "" {
		return
	}
	t.byState[state] += n
	for _, phase := range []fault.Phase{fault.PhasePrefill, fault.PhaseDecode} {
		if !v.CanServe(phase) {
			continue
		}
		t.servable[phase] += n
		if state == health.Ejected.String() || state == health.Probing.String() {
			t.down[phase] += n
		}
	}
}

// allDown says every member able to serve phase is ejected or probing (false with none).
func (t *stateTally) allDown(phase fault.Phase) bool {
	return t.servable[phase] > 0 && t.down[phase] == t.servable[phase]
}
