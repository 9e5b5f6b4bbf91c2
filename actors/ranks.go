package actors

import (
	"github.com/narwhal-router/narwhal/actors/placement"
	"github.com/narwhal-router/narwhal/messages"
	"github.com/narwhal-router/narwhal/transport"
)

// An engine's data-parallel ranks (placement.Rank): the pool makes them, from
// engines[].data_parallel_size when it adds the engine, or from the engine's own metrics
// (one engine label value per rank) when the first scrape shows more than one and the size is
// 0. Each rank past the first takes a prefix-index slot of its own (rank 0 has the engine's)
// and, when the engine publishes KV events, a feed of its own (kvfeeds.go); the slots are
// retired with the engine's.

// ranksFound tells the pool the scraper saw n ranks in the engine's metrics.
type ranksFound struct {
	view *placement.Engine
	n    int
}

// ranksFinder is what st's scraper calls when the engine's metrics show several ranks: a
// message to the pool, or nil when engines[].data_parallel_size settles the count.
func (p *poolActor) ranksFinder(st *engineState) func(n int) {
	if st.spec.DataParallelSize != 0 {
		return nil
	}
	pool, root, v := p.self, p.r.root, st.view
	return func(n int) { root.Send(pool, &ranksFound{view: v, n: n}) }
}

// makeRanks gives v n ranks (n > 1), taking a prefix-index slot for every rank past the first.
func (p *poolActor) makeRanks(v *placement.Engine, n int) {
	ranks := make([]*placement.Rank, n)
	ranks[0] = &placement.Rank{N: 0, Idx: v.Idx}
	for i := 1; i < n; i++ {
		idx := -1
		if v.Idx >= 0 { // an engine without a slot is placed without prefix preference: so are its ranks
			idx = p.r.fleet.Index.TakeSlot()
		}
		ranks[i] = &placement.Rank{N: i, Idx: idx}
	}
	v.SetRanks(ranks)
}

// retireRanks takes back the slots of v's ranks past the first (gone retires the engine's).
func (p *poolActor) retireRanks(v *placement.Engine) {
	for _, r := range v.Ranks() {
		if r.N > 0 {
			p.r.fleet.Index.Retire(r.Idx)
		}
	}
}

// onRanksFound makes the ranks a scrape found, if the engine is still a member whose size was
// left to its metrics and has none yet; the fleet is published again so that placement and the
// prefix index know the new slots, and the ranks' KV event feeds start.
func (p *poolActor) onRanksFound(m *ranksFound) {
	st := p.members[m.view.Name]
	if st == nil || st.view != m.view || st.spec.DataParallelSize != 0 || len(m.view.Ranks()) > 0 || m.n < 2 {
		return
	}
	p.makeRanks(m.view, m.n)
	p.r.log.Info("engine serves data-parallel ranks: placing each", "engine", m.view.Name, "ranks", m.n)
	p.r.fleet.Publish(p.views())
	p.r.kvFeeds.addRanks(m.view, st.spec)
}

// rankStates are v's ranks for /engines and the tree dump; nil for an engine of one rank.
func (r *Router) rankStates(v *placement.Engine) []messages.RankState {
	ranks := v.Ranks()
	if len(ranks) == 0 {
		return nil
	}
	var scraped []transport.RankLoad
	if s := v.Scraped.Load(); s != nil {
		scraped = s.Load.Ranks
	}
	out := make([]messages.RankState, len(ranks))
	for i, rk := range ranks {
		out[i] = messages.RankState{Rank: rk.N, Reservations: int(rk.Held.Load()),
			PrefixBlocks: r.fleet.Index.HeldBy(rk.Idx), EventBlocks: r.fleet.Index.EventBlocks(rk.Idx)}
		if l, ok := (transport.EngineLoad{Ranks: scraped}).Rank(rk.N); ok {
			out[i].Running, out[i].Waiting = l.Running, l.Waiting
		}
	}
	return out
}
