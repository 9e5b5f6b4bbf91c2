package cluster

import (
	"hash/fnv"
	"strings"
	"time"

	"github.com/asynkron/protoactor-go/cluster"
)

// ShouldProbe reports whether this node is the one that probes engine this interval: the
// member the engine's name hashes to (rendezvous hashing over the live members), or any node
// when no live verdict from another node says the engine is out (its ejection is local news).
func (n *Node) ShouldProbe(engine string) bool {
	if n == nil {
		return true
	}
	w, ok := n.board.winner(engine, time.Now())
	if !ok || w.State == StateAdmitted {
		return true
	}
	return n.prober(engine) == n.advertise
}

// prober is the address of the member that probes engine: the highest hash of (member address,
// engine). Addresses, not member ids, so that a rejoin does not move every engine's prober.
func (n *Node) prober(engine string) string {
	n.mu.Lock()
	members := n.members
	n.mu.Unlock()
	best, bestH := n.advertise, uint64(0)
	for _, m := range members {
		h := fnv.New64a()
		h.Write([]byte(m.Address()))
		h.Write([]byte{0})
		h.Write([]byte(engine))
		if s := h.Sum64(); s > bestH || (s == bestH && m.Address() > best) {
			best, bestH = m.Address(), s
		}
	}
	return best
}

// systemID is the actor-system id of a member: gossip names members by it, while providers may
// decorate it (etcd's member ids are "cluster@id").
func systemID(m *cluster.Member) string {
	if i := strings.LastIndexByte(m.Id, '@'); i >= 0 {
		return m.Id[i+1:]
	}
	return m.Id
}
