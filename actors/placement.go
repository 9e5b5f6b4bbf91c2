package actors

import (
	"math/rand/v2"
	"sync/atomic"

	"github.com/asynkron/protoactor-go/actor"

	"github.com/narwhal-router/narwhal/config"
	"github.com/narwhal-router/narwhal/messages"
	"github.com/narwhal-router/narwhal/transport"
)

// engineView is the read-only face an engine actor shows to placement. Only the engine actor
// writes it; request supervisors read it to choose candidates, then ask the engine actor, which
// has the final word (so a stale view costs a refused Reserve, never a broken invariant).
type engineView struct {
	name        string
	role        config.Role
	maxInflight int
	client      *transport.EngineClient
	pid         *actor.PID

	models    atomic.Pointer[[]string]
	load      atomic.Int32 // reservations held, both phases
	placeable atomic.Bool  // admitted: neither quarantined nor ejected
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
	return v.maxInflight == 0 || int(v.load.Load()) < v.maxInflight
}

func (v *engineView) canServe(p messages.Phase) bool {
	if p == messages.PhasePrefill {
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
func (f *fleet) pick(phase messages.Phase, model string, avoid, full, exclude []string) (*engineView, scarcity) {
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
	if b.load.Load() < a.load.Load() {
		return b, available
	}
	return a, available
}

// anyAdmitted returns an admitted engine able to run phase, other than not, or nil.
func (f *fleet) anyAdmitted(phase messages.Phase, not *engineView) *engineView {
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
