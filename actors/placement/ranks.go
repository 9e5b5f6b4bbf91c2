package placement

import (
	"sync/atomic"
	"time"

	"github.com/narwhal-router/narwhal/config"
	"github.com/narwhal-router/narwhal/transport"
	"github.com/narwhal-router/narwhal/transport/fault"
)

// Rank is one data-parallel rank of an engine: vLLM started with --data-parallel-size N runs N
// engine cores behind one API server, each with its own scheduler and its own KV cache, and
// the header X-data-parallel-rank picks one (transport.RankHeader). The engine is placed as a
// whole (its breaker, slots and max_inflight are the API server's); the rank is then chosen
// inside it (pickRank), and each rank has its own prefix-index slot, reservations and load.
type Rank struct {
	// N is the rank's index, the header's value; Idx its prefix-index slot (rank 0 shares the
	// engine's Idx). Writer: the pool, before the engine's ranks are set.
	N, Idx int
	// Held counts the reservations on the rank (both phases), and PrefillTokens the prompt
	// tokens of its prefill reservations. Writer: the request supervisors, with the engine's
	// slot they take and give back (Take, Give).
	Held          atomic.Int32
	PrefillTokens atomic.Int64
}

// Take counts a reservation on r, with the prompt tokens of a prefill; nil-safe.
func (r *Rank) Take(phase fault.Phase, tokens int) {
	if r == nil {
		return
	}
	r.Held.Add(1)
	if phase == fault.PhasePrefill {
		r.PrefillTokens.Add(int64(tokens))
	}
}

// Give returns what Take counted; nil-safe.
func (r *Rank) Give(phase fault.Phase, tokens int) {
	if r == nil {
		return
	}
	r.Held.Add(-1)
	if phase == fault.PhasePrefill {
		r.PrefillTokens.Add(-int64(tokens))
	}
}

// Pin is the rank a leg's request carries; nil pins none.
func (r *Rank) Pin() transport.Rank {
	if r == nil {
		return transport.Rank{}
	}
	return transport.PinRank(r.N)
}

// SlotOf is the prefix-index slot a prompt placed on v's rank r is recorded under: r's, or
// v's own when it has no ranks.
func SlotOf(v *Engine, r *Rank) int {
	if r != nil {
		return r.Idx
	}
	return v.Idx
}

// Ranks are v's data-parallel ranks in rank order; nil for an engine of one rank.
func (v *Engine) Ranks() []*Rank {
	if p := v.ranks.Load(); p != nil {
		return *p
	}
	return nil
}

// SetRanks makes ranks v's (the pool: before publication for a configured count, or when the
// scrape found them, before it publishes the fleet again). ranks[0].Idx is v.Idx.
func (v *Engine) SetRanks(ranks []*Rank) { v.ranks.Store(&ranks) }

// IndexSlots are the prefix-index slots of v and its ranks.
func (v *Engine) IndexSlots() []int {
	rs := v.Ranks()
	if len(rs) == 0 {
		return []int{v.Idx}
	}
	out := make([]int, len(rs))
	for i, r := range rs {
		out[i] = r.Idx
	}
	return out
}

// rankLoad is r's load as a's placement weighs it, in the units of loadOf: for a decode its
// reservations, or with a fresh scrape the larger of those and the rank's running sequences,
// plus its waiting ones; for a prefill the prompt tokens it computes for us plus a's prompt per
// request the scrape shows beyond ours.
func rankLoad(v *Engine, r *Rank, a *Ask, now time.Time) int {
	held := int(r.Held.Load())
	var rl transport.RankLoad
	fresh := false
	if l, ok := v.Fresh(now, a.Rules.ScrapeStale); ok {
		rl, fresh = l.Rank(r.N)
	}
	if a.Phase == fault.PhasePrefill {
		n := int(r.PrefillTokens.Load())
		if other := rl.Running + rl.Waiting - held; fresh && other > 0 {
			n += other * max(1, a.Tokens)
		}
		return n
	}
	if fresh {
		return max(held, rl.Running) + rl.Waiting
	}
	return held
}

// pickRank chooses the rank of v a's leg runs on, and its prefix match. Under
// placement.policy prefix with a prompt, the rank with the longest match among those under
// the load bound (load_factor × the ranks' mean load, as between engines), the less loaded on a
// tie; otherwise, or with no match under the bound, the least loaded rank. Ties left go to one
// of the tied at random, so that an idle engine's ranks fill evenly.
func (f *Snapshot) pickRank(v *Engine, a *Ask, now time.Time) (*Rank, int) {
	ranks := v.Ranks()
	var mbuf [32]slotDepth
	var match prefixMatches
	if a.Rules.Placement == config.PlacePrefix && f.Index != nil && len(a.Blocks) > 0 {
		match = f.Index.match(a.Blocks, mbuf[:0])
	}
	var lbuf [16]int
	loads := lbuf[:0]
	total := 0
	for _, r := range ranks {
		l := rankLoad(v, r, a, now)
		loads = append(loads, l)
		total += l
	}
	limit := loadBound(a.Rules.LoadFactor, total, len(ranks))
	var best *Rank
	bestMatch, bestLoad, ties := 0, 0, 0
	for i, r := range ranks {
		n := matchAt(match, r.Idx)
		if n == 0 || loads[i] > limit || n < bestMatch {
			continue
		}
		switch {
		case best == nil || n > bestMatch || loads[i] < bestLoad:
			best, bestMatch, bestLoad, ties = r, n, loads[i], 1
		case loads[i] == bestLoad:
			if ties++; f.rnd(ties) == 0 {
				best = r
			}
		}
	}
	if best != nil {
		return best, bestMatch
	}
	for i, r := range ranks {
		switch {
		case best == nil || loads[i] < bestLoad:
			best, bestLoad, ties = r, loads[i], 1
		case loads[i] == bestLoad:
			if ties++; f.rnd(ties) == 0 {
				best = r
			}
		}
	}
	return best, matchAt(match, best.Idx)
}

// matchAt is slot's match in a prompt's matches.
func matchAt(match prefixMatches, slot int) int {
	if slot < 0 || slot >= MaxIndexed {
		return 0
	}
	return match.of(slot)
}

// HeldAt is how many blocks the exact index holds for the engine (or rank) in slot, from its
// KV events.
func (e *ExactIndex) HeldAt(slot int) int {
	e.mu.RLock()
	defer e.mu.RUnlock()
	if en := e.engines[slot]; en != nil {
		return len(en.held)
	}
	return 0
}

// EventBlocks is HeldAt of the index's exact part.
func (x *PrefixIndex) EventBlocks(slot int) int { return x.exact.HeldAt(slot) }
