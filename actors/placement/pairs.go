package placement

import (
	"github.com/narwhal-router/narwhal/actors/health"
	"github.com/narwhal-router/narwhal/transport/fault"
	"github.com/narwhal-router/narwhal/transport/kv"
)

// Pairs: placement never pairs a producer with a consumer that cannot read its handoffs. Two
// things say so: their KV shapes differ (kv.Mismatch over what the engines' scrapes report:
// block size, cache dtype), or the pair's breaker is open (health.PairBreakers: the blame board
// found a failed read confined to that pair, and no probe of the pair has passed since).

// pairSet is the open pair breakers as placement reads them: immutable, swapped whole.
type pairSet struct {
	open map[health.PairKey]string // the cause of each
}

// PublishPairs makes open the pairs placement keeps apart. Writer: the blame board's actor,
// the one writer of the pair breakers (actors/pairs.go).
func (f *Fleet) PublishPairs(open []health.PairView) {
	s := &pairSet{open: make(map[health.PairKey]string, len(open))}
	for _, p := range open {
		s.open[p.PairKey] = p.Cause
	}
	f.pairs.Store(s)
}

// KVShape is the engine's KV layout as the router knows it: block size and cache dtype from its
// last successful /metrics scrape, TP from its own descriptors (zero fields: unknown).
func (v *Engine) KVShape() kv.Shape {
	var s kv.Shape
	if l := v.Scraped.Load(); l != nil {
		s = l.Load.Shape
	}
	s.TP = int(v.TP.Load())
	return s
}

// Pairable says whether producer p may hand its KV cache to consumer c, and why not: their KV
// shapes differ, or the pair's breaker is open. An engine is always pairable with itself.
func (f *Snapshot) Pairable(p, c *Engine) (ok bool, why string) {
	if p == c {
		return true, ""
	}
	if why := kv.Mismatch(p.KVShape(), c.KVShape()); why != "" {
		return false, "incompatible KV caches: " + why
	}
	if s := f.pairs.Load(); s != nil && len(s.open) > 0 {
		if cause, open := s.open[health.PairKey{Producer: p.Name, Consumer: c.Name}]; open {
			return false, "pair breaker open: " + cause
		}
	}
	return true, ""
}

// withUnpairable is exclude plus the producers that cannot hand to cons (exclude itself when
// every one can, so the common case allocates nothing).
func (f *Snapshot) withUnpairable(exclude []string, cons *Engine) []string {
	out := exclude
	for _, p := range f.byPhase[fault.PhasePrefill] {
		if ok, _ := f.Pairable(p, cons); !ok {
			if len(out) == len(exclude) {
				out = append(exclude[:len(exclude):len(exclude)], p.Name)
				continue
			}
			out = append(out, p.Name)
		}
	}
	return out
}

// OtherPartners says producer p may hand to a consumer in placement other than c, and consumer c
// read the handoffs of a producer in placement other than p (Pairable both): keeping the pair
// p→c apart leaves both engines something to do.
func (f *Snapshot) OtherPartners(p, c *Engine) bool {
	return f.hasPartner(fault.PhaseDecode, p, c, func(v *Engine) (bool, string) { return f.Pairable(p, v) }) &&
		f.hasPartner(fault.PhasePrefill, c, p, func(v *Engine) (bool, string) { return f.Pairable(v, c) })
}

// hasPartner says an engine in placement running phase, neither self nor not, passes pairable.
func (f *Snapshot) hasPartner(phase fault.Phase, self, not *Engine, pairable func(*Engine) (bool, string)) bool {
	for _, v := range f.byPhase[phase] {
		if v != self && v != not && v.Placeable.Load() {
			if ok, _ := pairable(v); ok {
				return true
			}
		}
	}
	return false
}
