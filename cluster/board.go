package cluster

import (
	"sort"
	"sync"
	"time"
)

// Engine states a verdict can carry (the breaker's states).
const (
	StateAdmitted    = "admitted"
	StateQuarantined = "quarantined"
	StateEjected     = "ejected"
	StateProbing     = "probing"
)

// Verdict is what one node decided about one engine, as the engine actors see it.
type Verdict struct {
	Engine string `json:"engine"`
	State  string `json:"state"`
	// Until is the end of a quarantine, or the deciding node's next probe of an ejected engine.
	Until  time.Time `json:"until"`
	Reason string    `json:"reason,omitempty"`
	// Node is the publishing node's name and Process the id its process drew at start: a node
	// restarted under the same name is another process, and applies what its previous one
	// decided.
	Node    string `json:"node"`
	Process string `json:"process,omitempty"`
	// Origin is the node that decided, when Node re-owned the verdict: Node still holds the
	// engine out on it after Origin stopped re-publishing it (Origin is down, or restarted).
	Origin  string    `json:"origin,omitempty"`
	Decided time.Time `json:"decided"`
	Admin   bool      `json:"admin,omitempty"`
	// Expires is when the verdict lapses unless its node re-publishes it.
	Expires time.Time `json:"expires"`
	// Lapsing marks a verdict handed to the engine actors because its node has stopped
	// re-publishing it (board.lapsing): a node that still holds the engine out on it re-owns it.
	// It never travels.
	Lapsing bool `json:"-"`
}

// DecidedBy is the node that made the decision: the origin of a re-owned verdict, else its
// publisher.
func (v Verdict) DecidedBy() string {
	if v.Origin != "" {
		return v.Origin
	}
	return v.Node
}

// newer orders verdicts on one engine: the later decision wins; equal instants fall to the
// node name so that every node picks the same winner.
func (v Verdict) newer(o Verdict) bool {
	if !v.Decided.Equal(o.Decided) {
		return v.Decided.After(o.Decided)
	}
	return v.Node > o.Node
}

func (v Verdict) wire() *WireVerdict {
	w := &WireVerdict{Engine: v.Engine, State: v.State, Reason: v.Reason, Node: v.Node, Process: v.Process, Origin: v.Origin,
		DecidedUnixNano: v.Decided.UnixNano(), Admin: v.Admin, ExpiresUnixNano: v.Expires.UnixNano()}
	if !v.Until.IsZero() {
		w.UntilUnixNano = v.Until.UnixNano()
	}
	return w
}

func fromWire(w *WireVerdict) Verdict {
	v := Verdict{Engine: w.Engine, State: w.State, Reason: w.Reason, Node: w.Node, Process: w.Process, Origin: w.Origin,
		Decided: time.Unix(0, w.DecidedUnixNano), Admin: w.Admin, Expires: time.Unix(0, w.ExpiresUnixNano)}
	if w.UntilUnixNano != 0 {
		v.Until = time.Unix(0, w.UntilUnixNano)
	}
	return v
}

// board holds this node's own live verdicts and the last set each peer member published, and
// merges them: per engine, the newest unexpired verdict wins. Peers' sets are kept per member
// id because protoactor keeps gossip state per member forever; expiry, not membership, retires
// a departed node's verdicts. A verdict is this node's own when its process published it —
// not when it carries this node's name: a restarted node's previous process is a peer.
type board struct {
	mu      sync.Mutex
	self    string
	process string
	ttl     time.Duration
	local   map[string]Verdict            // engine → this node's live verdict
	peers   map[string]map[string]Verdict // member id → engine → verdict
	// heard is when each member's set last arrived, for /cluster.
	heard map[string]peerSet
	// winners is the last merged view handed to the engine actors, to report changes once.
	winners map[string]Verdict
}

type peerSet struct {
	node      string
	at        time.Time
	published time.Time
}

func newBoard(self, process string, ttl time.Duration) *board {
	return &board{self: self, process: process, ttl: ttl, local: map[string]Verdict{}, peers: map[string]map[string]Verdict{},
		heard: map[string]peerSet{}, winners: map[string]Verdict{}}
}

// mine reports whether this process published v.
func (b *board) mine(v Verdict) bool { return v.Process == b.process }

// decide records a local decision. An admitted verdict needs no re-publication (admitted is
// what a node assumes without news): it is kept one TTL so that peers hear it, then dropped.
// A decision made elsewhere and re-owned here keeps its instant (v.Decided).
func (b *board) decide(v Verdict, now time.Time) Verdict {
	b.mu.Lock()
	defer b.mu.Unlock()
	v.Node, v.Process, v.Lapsing = b.self, b.process, false
	if v.Decided.IsZero() {
		v.Decided = now
	}
	v.Expires = now.Add(b.ttl)
	b.local[v.Engine] = v
	b.winners[v.Engine] = b.winnerLocked(v.Engine, now)
	return v
}

// localSet is the set to publish: live local verdicts with a fresh deadline. A verdict a later
// decision elsewhere has overtaken is dropped, as is an admitted one older than a TTL. A copy
// of the same decision another node publishes too (a verdict several nodes re-owned) is kept:
// the decision lives as long as any node that holds the engine out on it.
func (b *board) localSet(now time.Time) *VerdictSet {
	b.mu.Lock()
	defer b.mu.Unlock()
	set := &VerdictSet{Node: b.self, PublishedUnixNano: now.UnixNano()}
	engines := make([]string, 0, len(b.local))
	for e := range b.local {
		engines = append(engines, e)
	}
	sort.Strings(engines)
	for _, e := range engines {
		v := b.local[e]
		if w, ok := b.winners[e]; ok && !b.mine(w) && w.Decided.After(v.Decided) {
			delete(b.local, e)
			continue
		}
		if v.State == StateAdmitted && now.Sub(v.Decided) > b.ttl {
			delete(b.local, e)
			continue
		}
		if v.State != StateAdmitted {
			v.Expires = now.Add(b.ttl)
			b.local[e] = v
		}
		set.Verdicts = append(set.Verdicts, v.wire())
	}
	return set
}

// receive stores a peer member's set and returns the engines whose winning verdict changed to
// one decided elsewhere: the engine actors must hear about those.
func (b *board) receive(member string, set *VerdictSet, now time.Time) []Verdict {
	b.mu.Lock()
	defer b.mu.Unlock()
	m := make(map[string]Verdict, len(set.Verdicts))
	for _, w := range set.Verdicts {
		m[w.Engine] = fromWire(w)
	}
	// Engines the previous set named may have changed too (a verdict withdrawn).
	touched := map[string]bool{}
	for e := range b.peers[member] {
		touched[e] = true
	}
	for e := range m {
		touched[e] = true
	}
	b.peers[member] = m
	b.heard[member] = peerSet{node: set.Node, at: now, published: time.Unix(0, set.PublishedUnixNano)}
	var changed []Verdict
	names := make([]string, 0, len(touched))
	for e := range touched {
		names = append(names, e)
	}
	sort.Strings(names)
	for _, e := range names {
		w := b.winnerLocked(e, now)
		prev, had := b.winners[e]
		if w.Engine == "" {
			delete(b.winners, e)
			continue
		}
		b.winners[e] = w
		if !b.mine(w) && (!had || w != prev) {
			changed = append(changed, w)
		}
	}
	return changed
}

// winnerLocked is the newest unexpired verdict on engine (zero when none).
func (b *board) winnerLocked(engine string, now time.Time) Verdict {
	var best Verdict
	consider := func(v Verdict, ok bool) {
		if !ok || !now.Before(v.Expires) {
			return
		}
		if best.Engine == "" || v.newer(best) {
			best = v
		}
	}
	v, ok := b.local[engine]
	consider(v, ok)
	for _, m := range b.peers {
		v, ok := m[engine]
		consider(v, ok)
	}
	return best
}

// Winner is the current merged verdict on engine, if any is live.
func (b *board) winner(engine string, now time.Time) (Verdict, bool) {
	b.mu.Lock()
	defer b.mu.Unlock()
	w := b.winnerLocked(engine, now)
	return w, w.Engine != ""
}

// view is every engine's live winning verdict, sorted by engine.
func (b *board) view(now time.Time) []Verdict {
	b.mu.Lock()
	defer b.mu.Unlock()
	engines := map[string]bool{}
	for e := range b.local {
		engines[e] = true
	}
	for _, m := range b.peers {
		for e := range m {
			engines[e] = true
		}
	}
	out := make([]Verdict, 0, len(engines))
	for e := range engines {
		if w := b.winnerLocked(e, now); w.Engine != "" {
			out = append(out, w)
		}
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Engine < out[j].Engine })
	return out
}

// lapsing lists, per engine, the latest decision held here when no process publishes it any
// more: its newest copy — the one renewed last, among copies of one decision — is another
// process's, holds the engine out, and has less than half a TTL left, which a live node's
// re-publication would have renewed. Its node is down, cut off, or restarted (its new process
// publishes only what it decides itself). The engine actors that still hold the engine out on
// it re-own it (Node.reown), so that it outlives its node: without that, it lapses while the
// nodes that heard it keep the engine out, and every node that starts afterwards places on it.
// A lapsed verdict is still found here until forget drops its set.
func (b *board) lapsing(now time.Time) []Verdict {
	b.mu.Lock()
	defer b.mu.Unlock()
	latest := map[string]Verdict{}
	consider := func(v Verdict) {
		l, ok := latest[v.Engine]
		if !ok || v.Decided.After(l.Decided) || (v.Decided.Equal(l.Decided) && v.Expires.After(l.Expires)) {
			latest[v.Engine] = v
		}
	}
	for _, v := range b.local {
		consider(v)
	}
	for _, m := range b.peers {
		for _, v := range m {
			consider(v)
		}
	}
	var out []Verdict
	for _, v := range latest {
		if b.mine(v) || v.State == StateAdmitted || v.Expires.Sub(now) > b.ttl/2 {
			continue
		}
		if v.State == StateQuarantined && !v.Until.After(now) {
			continue // a quarantine that ran out holds nothing out
		}
		v.Lapsing = true
		out = append(out, v)
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Engine < out[j].Engine })
	return out
}

// forget drops the sets of members that left long enough ago that all they said has expired.
func (b *board) forget(now time.Time) {
	b.mu.Lock()
	defer b.mu.Unlock()
	for id, m := range b.peers {
		live := false
		for _, v := range m {
			if now.Before(v.Expires) {
				live = true
				break
			}
		}
		if !live && now.Sub(b.heard[id].at) > b.ttl {
			delete(b.peers, id)
			delete(b.heard, id)
		}
	}
}
