package cluster

import (
	"time"

	"github.com/asynkron/protoactor-go/cluster"
)

// event handles the cluster's own events: peers' verdict sets and topology changes.
func (n *Node) event(inc *incarnation, evt any) {
	switch e := evt.(type) {
	case *cluster.GossipUpdate:
		if e.MemberID == inc.system.ID {
			return
		}
		n.mu.Lock()
		n.lastGossip[e.MemberID] = time.Now()
		n.mu.Unlock()
		if e.Key != verdictKey || e.Value == nil {
			return
		}
		var set VerdictSet
		if err := e.Value.UnmarshalTo(&set); err != nil {
			n.log.Warn("peer verdicts unreadable", "member_id", e.MemberID, "error", err)
			return
		}
		changed := n.board.receive(e.MemberID, &set, time.Now())
		if on := n.on.Load(); on != nil {
			for _, v := range changed {
				(*on)(v)
			}
		}
	case *cluster.ClusterTopology:
		n.mu.Lock()
		if n.inc == inc || n.inc == nil {
			n.members = e.Members
		}
		n.mu.Unlock()
		for _, m := range e.Joined {
			if m.Id != inc.system.ID {
				n.log.Info("cluster member joined", "member_id", m.Id, "address", m.Address())
			}
		}
		for _, m := range e.Left {
			n.log.Info("cluster member left", "member_id", m.Id, "address", m.Address())
		}
		if len(e.Joined) > 0 {
			// A member that joins late gets the whole gossip state; pushing now only makes it
			// arrive without waiting for the next tick.
			n.sendNow()
		}
	}
}

// Attach makes f the receiver of peers' verdicts and hands it, at once, every live verdict a
// peer decided: what arrived before the engine actors existed is not lost.
func (n *Node) Attach(f func(Verdict)) {
	if n == nil {
		return
	}
	n.on.Store(&f)
	for _, v := range n.board.view(time.Now()) {
		if !n.board.mine(v) {
			f(v)
		}
	}
}

// Own reports whether this process published v. A verdict under this node's name from its
// previous process (before a restart) is a peer's: this process applies it.
func (n *Node) Own(v Verdict) bool {
	return n != nil && n.board.mine(v)
}

// handLapsing hands the engine actors the verdicts no process publishes any more
// (board.lapsing): a node that still holds an engine out on one re-owns it.
func (n *Node) handLapsing(now time.Time) {
	on := n.on.Load()
	if on == nil {
		return
	}
	for _, v := range n.board.lapsing(now) {
		(*on)(v)
	}
}

// Publish shares a decision this node made about an engine: it is on the board at once and on
// its way to every peer now, not at the next gossip tick.
func (n *Node) Publish(v Verdict) {
	if n == nil {
		return
	}
	n.board.decide(v, time.Now())
	n.sendNow()
}

func (n *Node) sendNow() {
	select {
	case n.push <- struct{}{}:
	default:
	}
}

// send publishes this node's live verdicts and pushes them to peers at once.
func (n *Node) send() {
	inc := n.current()
	if inc == nil {
		return
	}
	inc.cl.Gossip.SetState(verdictKey, n.board.localSet(time.Now()))
	inc.cl.Gossip.SendState()
}

// forgetGossip drops the last-gossip times of members gone for longer than a verdict lives
// (every rejoin elsewhere leaves an identity behind).
func (n *Node) forgetGossip() {
	n.mu.Lock()
	defer n.mu.Unlock()
	live := map[string]bool{}
	for _, m := range n.members {
		live[systemID(m)] = true
	}
	for id, at := range n.lastGossip {
		if !live[id] && time.Since(at) > n.cfg.VerdictTTLS.Duration() {
			delete(n.lastGossip, id)
		}
	}
}

// Verdict is the current winning verdict on engine, if a live one exists.
func (n *Node) Verdict(engine string) (Verdict, bool) {
	if n == nil {
		return Verdict{}, false
	}
	return n.board.winner(engine, time.Now())
}
