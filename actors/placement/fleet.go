package placement

import (
	"math/rand/v2"
	"strings"
	"sync/atomic"
	"time"

	"github.com/narwhal-router/narwhal/config"
	"github.com/narwhal-router/narwhal/transport/fault"
)

// fleet is the engines placement may use, as an immutable snapshot swapped whole when the
// fleet changes: a supervisor loads it once per placement and reads it without a lock, the
// pool (the only writer) publishes a new one for every change. The prefix index and the round
// robin positions outlive the snapshots.
type Fleet struct {
	// cur is the snapshot. Writer: the pool (Publish).
	cur atomic.Pointer[Snapshot]
	// Index is the estimated prefix index (its own writers: prefix.go).
	Index *PrefixIndex
	// rr is the round robin position per phase. Writers: the request supervisors placing
	// under placement.policy round_robin, by atomic increment.
	rr [2]atomic.Uint64
	// rnd draws a number in [0, n): the randomness of p2c and of ties, safe for concurrent use.
	rnd func(n int) int
	// pairs are the open pair breakers (pairs.go). Writer: the blame board's actor.
	pairs atomic.Pointer[pairSet]
}

// NewFleet is an empty fleet whose placements remember prompts in index and draw their random
// choices from rnd (nil: math/rand/v2's IntN). A test passes a seeded or scripted rnd.
func NewFleet(index *PrefixIndex, rnd func(n int) int) *Fleet {
	if rnd == nil {
		rnd = rand.IntN
	}
	f := &Fleet{Index: index, rnd: rnd}
	f.Publish(nil)
	return f
}

// Load is the fleet as it is now.
func (f *Fleet) Load() *Snapshot { return f.cur.Load() }

// Publish makes engines (in their sources' order) the fleet placement sees.
func (f *Fleet) Publish(engines []*Engine) {
	s := &Snapshot{Engines: engines, byName: make(map[string]*Engine, len(engines)), Index: f.Index, rr: &f.rr, rnd: f.rnd,
		pairs: &f.pairs}
	slots := 0
	for _, v := range engines {
		s.byName[v.Name] = v
		for _, idx := range v.IndexSlots() { // its ranks' slots too: a rank's match is its engine's
			if idx >= 0 && idx < MaxIndexed {
				slots = max(slots, idx+1)
			}
		}
	}
	s.bySlot = make([]int32, slots)
	for i, v := range engines {
		for _, idx := range v.IndexSlots() {
			if idx >= 0 && idx < MaxIndexed {
				s.bySlot[idx] = int32(i + 1)
			}
		}
		for _, p := range []fault.Phase{fault.PhasePrefill, fault.PhaseDecode} {
			if v.CanServe(p) {
				s.byPhase[p] = append(s.byPhase[p], v)
			}
		}
	}
	f.cur.Store(s)
}

// Snapshot is the fleet at one moment: every engine added and not removed (joining,
// admitted, out of placement), in their sources' order. It is never modified, but for lists
// derived from it (candidates), made when first asked for.
type Snapshot struct {
	Engines []*Engine
	byName  map[string]*Engine
	// byPhase are the engines whose role runs each phase, and bySlot the position in engines
	// plus one of the engine holding each prefix index slot (0: none), so that placement reads
	// only the engines a leg can use and the index names.
	byPhase [2][]*Engine
	bySlot  []int32
	lists   atomic.Pointer[candidateLists]
	// adapters are the LoRA adapters the engines list (lora.go), made when first asked for.
	adapters atomic.Pointer[adapterNames]
	Index    *PrefixIndex
	rr       *[2]atomic.Uint64
	rnd      func(n int) int
	pairs    *atomic.Pointer[pairSet]
}

// candidateLists are the engines able to run a phase of a model, per (phase, model) asked for,
// as they were when modelsChanged stood at gen.
type candidateLists struct {
	gen uint64
	m   map[candidateKey][]*Engine
}

type candidateKey struct {
	Phase fault.Phase
	Model string
}

func (f *Snapshot) Engine(name string) *Engine { return f.byName[name] }

// Candidates are the engines whose role runs phase and which serve model, in the snapshot's
// order: made by one walk of the fleet, then kept until an engine's models change. A model no
// engine serves is not kept, so requests naming arbitrary models cannot grow the lists.
func (f *Snapshot) Candidates(phase fault.Phase, model string) []*Engine {
	gen := modelsChanged.Load()
	c := f.lists.Load()
	k := candidateKey{phase, model}
	if c != nil && c.gen == gen {
		if l, ok := c.m[k]; ok {
			return l
		}
	}
	var l []*Engine
	for _, v := range f.byPhase[phase] {
		if v.Serves(model) {
			l = append(l, v)
		}
	}
	if len(l) == 0 {
		return nil
	}
	// The key keeps a copy of the name: keeping the caller's would make every ask escape.
	n := &candidateLists{gen: gen, m: map[candidateKey][]*Engine{{phase, strings.Clone(model)}: l}}
	if c != nil && c.gen == gen {
		for ck, cl := range c.m {
			n.m[ck] = cl
		}
	}
	// Two placements racing here may each drop the other's new list; it is made again.
	f.lists.Store(n)
	return l
}

// Scarcity says why no candidate could be found, worst first.
type Scarcity uint8

const (
	available    Scarcity = iota
	NoRoom                // engines serve the model but all are full: queue
	NoAdmitted            // engines serve the model but none is admitted: 503
	UnknownModel          // no engine serves the model at all: 404
)

// ask is one leg's placement question.
type Ask struct {
	Phase fault.Phase
	Model string
	// Avoid lists engines to use only if nothing else can serve (a failed engine on retry; the
	// other leg's engine); Full lists engines that just refused a slot; Exclude lists engines
	// never to use.
	Avoid, Full, Exclude []string
	// Blocks are the prompt's block hashes, for prefix preference; tokens its token estimate,
	// the request's weight on a producer.
	Blocks []uint64
	Tokens int
	// Rules are the placement settings the request runs with (placement.*).
	Rules *config.FleetRuntime
	// Now is the placement's clock: backpressure spells and scrape freshness are read at it
	// (zero: the time of the call).
	Now time.Time
}

// placed is a leg's placement: the engine, or why there is none; match is the number of the
// prompt's leading blocks the prefix index says the engine served.
type Placed struct {
	Engine *Engine
	Why    Scarcity
	Match  int
	// Prefix is how the prefix index weighed in under placement.policy prefix (PrefixHit,
	// PrefixBounded, PrefixMiss), for the prefix placement metric; "" when it was not asked.
	Prefix string
	// Rank is the engine's data-parallel rank the leg runs on (ranks.go), and Match then that
	// rank's; nil for an engine of one rank.
	Rank *Rank
}

// How the prefix index weighed in on a placement (placed.Prefix).
const (
	PrefixHit     = "hit"     // an engine under the load bound held the prompt's prefix
	PrefixBounded = "bounded" // engines held it, but none under the bound
	PrefixMiss    = "miss"    // no engine held it
)

// Pick chooses an engine for phase by power of two choices on load (pickFor without a prompt).
func (f *Snapshot) Pick(rules *config.FleetRuntime, phase fault.Phase, model string, avoid, full, exclude []string) (*Engine, Scarcity) {
	p := f.Place(Ask{Phase: phase, Model: model, Avoid: avoid, Full: full, Exclude: exclude, Rules: rules})
	return p.Engine, p.Why
}
