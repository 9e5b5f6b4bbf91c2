package actors

import (
	"math/rand/v2"
	"sync/atomic"

	"github.com/asynkron/protoactor-go/actor"

	"github.com/narwhal-router/narwhal/config"
	"github.com/narwhal-router/narwhal/transport"
	"github.com/narwhal-router/narwhal/transport/fault"
)

// engineView is an engine as placement sees it, shared by every request supervisor. Its phase
// reservations are taken and returned by supervisors with a compare-and-swap, bounded by
// max_inflight: a slot costs no message, because a round trip to the engine actor is two
// goroutine hand-offs per phase per request (bench/README.md has the measurements). Everything
// else here — placeability, the failure streak, the models — is written by the engine actor
// alone and only read by others.
type engineView struct {
	name        string
	role        config.Role
	maxInflight int
	client      *transport.EngineClient
	pid         *actor.PID

	models    atomic.Pointer[[]string]
	slots     atomic.Uint64 // reservations held: prefill in the high 32 bits, decode in the low
	placeable atomic.Bool   // admitted: neither quarantined nor ejected
	streak    atomic.Int32  // the breaker's failure streak, so a success is reported only if it matters
	// takesOut is the consequence of the next counted failure, as the engine actor publishes it:
	// true when that failure quarantines or ejects the engine (breaker.takesOut).
	takesOut atomic.Bool
}

func packSlots(prefill, decode uint32) uint64 { return uint64(prefill)<<32 | uint64(decode) }

func unpackSlots(v uint64) (prefill, decode uint32) { return uint32(v >> 32), uint32(v) }

// reserved returns the reservations held per phase.
func (v *engineView) reserved() (prefill, decode int) {
	p, d := unpackSlots(v.slots.Load())
	return int(p), int(d)
}

// load is the reservations held in both phases.
func (v *engineView) load() int {
	p, d := v.reserved()
	return p + d
}

// reserve takes a slot in phase unless the engine is out of placement or at max_inflight.
func (v *engineView) reserve(phase fault.Phase) bool {
	for {
		cur := v.slots.Load()
		p, d := unpackSlots(cur)
		if !v.placeable.Load() || (v.maxInflight > 0 && int(p+d) >= v.maxInflight) {
			return false
		}
		if phase == fault.PhasePrefill {
			p++
		} else {
			d++
		}
		if v.slots.CompareAndSwap(cur, packSlots(p, d)) {
			return true
		}
	}
}

// release returns a slot taken with reserve, reporting whether the engine was full before.
func (v *engineView) release(phase fault.Phase) (wasFull bool) {
	for {
		cur := v.slots.Load()
		p, d := unpackSlots(cur)
		wasFull = v.maxInflight > 0 && int(p+d) >= v.maxInflight
		if phase == fault.PhasePrefill {
			p--
		} else {
			d--
		}
		if v.slots.CompareAndSwap(cur, packSlots(p, d)) {
			return wasFull
		}
	}
}

func (v *engineView) serves(model string) bool {
	p := v.models.Load()
	if p == nil {
		return false
	}
	for _, m := range *p {
		if m == model {
			return true
		}
	}
	return false
}

func (v *engineView) firstModel() string {
	if p := v.models.Load(); p != nil && len(*p) > 0 {
		return (*p)[0]
	}
	return ""
}

func (v *engineView) hasRoom() bool {
	return v.maxInflight == 0 || v.load() < v.maxInflight
}

func (v *engineView) canServe(p fault.Phase) bool {
	if p == fault.PhasePrefill {
		return v.role.CanPrefill()
	}
	return v.role.CanDecode()
}

// fleet is every configured engine, in configuration order. It never changes after start.
type fleet struct {
	engines []*engineView
	byName  map[string]*engineView
}

func (f *fleet) engine(name string) *engineView { return f.byName[name] }

// scarcity says why no candidate could be found, worst first.
type scarcity uint8

const (
	available    scarcity = iota
	noRoom                // engines serve the model but all are full: queue
	noAdmitted            // engines serve the model but none is admitted: 503
	unknownModel          // no engine serves the model at all: 404
)

// pick chooses an engine for phase by power of two choices on reservations: two random
// candidates, the less loaded wins, a tie goes to the first (already random). avoid lists
// engines to use only if nothing else can serve (a failed engine on retry; the producer, for
// decode); full lists engines that just refused a slot; exclude lists engines never to use.
func (f *fleet) pick(phase fault.Phase, model string, avoid, full, exclude []string) (*engineView, scarcity) {
	var buf [32]*engineView
	cands := buf[:0]
	var preferred [32]*engineView
	pref := preferred[:0]
	worst := unknownModel
	for _, v := range f.engines {
		if !v.canServe(phase) || !v.serves(model) {
			continue
		}
		if !v.placeable.Load() || contains(exclude, v.name) {
			worst = min(worst, noAdmitted)
			continue
		}
		if !v.hasRoom() || contains(full, v.name) {
			worst = min(worst, noRoom)
			continue
		}
		cands = append(cands, v)
		if !contains(avoid, v.name) {
			pref = append(pref, v)
		}
	}
	if len(pref) > 0 {
		cands = pref
	}
	switch len(cands) {
	case 0:
		return nil, worst
	case 1:
		return cands[0], available
	}
	i := rand.IntN(len(cands))
	j := rand.IntN(len(cands) - 1)
	if j >= i {
		j++
	}
	a, b := cands[i], cands[j]
	if b.load() < a.load() {
		return b, available
	}
	return a, available
}

// anyAdmitted returns an admitted engine able to run phase, other than not, or nil.
func (f *fleet) anyAdmitted(phase fault.Phase, not *engineView) *engineView {
	for _, v := range f.engines {
		if v != not && v.canServe(phase) && v.placeable.Load() {
			return v
		}
	}
	return nil
}

// Models is the union of the models the fleet's engines serve, for GET /v1/models.
func (f *fleet) models() []string {
	seen := map[string]bool{}
	var out []string
	for _, v := range f.engines {
		if p := v.models.Load(); p != nil {
			for _, m := range *p {
				if !seen[m] {
					seen[m] = true
					out = append(out, m)
				}
			}
		}
	}
	return out
}

func contains(list []string, s string) bool {
	for _, v := range list {
		if v == s {
			return true
		}
	}
	return false
}
