package cluster

import (
	"sort"
	"time"
)

// Status is what /cluster shows an operator: who this node is, the members it sees, when each
// last gossiped, and the merged verdicts.
type Status struct {
	Enabled bool   `json:"enabled"`
	Cluster string `json:"cluster,omitempty"`
	Node    string `json:"node,omitempty"`
	// Process is the id this process drew at start; the verdicts it publishes carry it.
	Process  string `json:"process,omitempty"`
	Address  string `json:"address,omitempty"`
	Provider string `json:"provider,omitempty"`
	// MemberID is this incarnation's protoactor identity; Generation counts incarnations
	// (a node rejoins under a new identity after a stall or a partition).
	MemberID   string     `json:"member_id,omitempty"`
	Generation int        `json:"generation,omitempty"`
	Joined     bool       `json:"joined"`
	JoinError  string     `json:"join_error,omitempty"`
	LastRejoin *Rejoin    `json:"last_rejoin,omitempty"`
	Stalls     int        `json:"stalls"`
	Fenced     bool       `json:"fenced"`
	Members    []Member   `json:"members"`
	Verdicts   []Verdict  `json:"verdicts"`
	LastGossip *time.Time `json:"last_gossip"`
	// Authenticated says the cluster runs with cluster.tls; RejectedHeartbeats counts the
	// heartbeats it refused as unsigned, signed by a certificate the CA did not sign, stale or
	// replayed.
	Authenticated      bool  `json:"authenticated"`
	RejectedHeartbeats int64 `json:"rejected_heartbeats"`
}

// Rejoin says when and why this node last took a new identity.
type Rejoin struct {
	At     time.Time `json:"at"`
	Reason string    `json:"reason"`
}

// Member is one member of the cluster as this node sees it.
type Member struct {
	Node     string `json:"node"`
	MemberID string `json:"member_id"`
	Address  string `json:"address"`
	Self     bool   `json:"self"`
	// LastGossip is when gossip from the member last reached this node; LastHeartbeat when its
	// last membership heartbeat did (static provider).
	LastGossip    *time.Time `json:"last_gossip"`
	LastHeartbeat *time.Time `json:"last_heartbeat,omitempty"`
}

// Status reports the node's view of the cluster. A nil node reports the cluster off.
func (n *Node) Status() Status {
	if n == nil {
		return Status{Members: []Member{}, Verdicts: []Verdict{}}
	}
	now := time.Now()
	st := Status{Enabled: true, Cluster: n.cfg.Name, Node: n.name, Process: n.process, Address: n.advertise,
		Provider: n.cfg.Provider, Verdicts: n.board.view(now), Members: []Member{},
		Authenticated: n.creds != nil, RejectedHeartbeats: n.rejected.Load()}
	n.mu.Lock()
	inc, members := n.inc, n.members
	st.Generation, st.Stalls, st.JoinError = n.generation, n.stalls, n.startErr
	st.Fenced = now.Before(n.fencedUntil)
	if !n.lastRejoin.IsZero() && n.rejoinWhy != "" {
		st.LastRejoin = &Rejoin{At: n.lastRejoin, Reason: n.rejoinWhy}
	}
	gossip := make(map[string]time.Time, len(n.lastGossip))
	var latest time.Time
	for id, t := range n.lastGossip {
		gossip[id] = t
		if t.After(latest) {
			latest = t
		}
	}
	n.mu.Unlock()
	if !latest.IsZero() {
		st.LastGossip = &latest
	}
	if inc == nil {
		return st
	}
	st.Joined, st.MemberID = true, inc.system.ID
	var beats map[string]time.Time
	if inc.static != nil {
		beats = inc.static.heartbeats()
	}
	names := n.board.names()
	for _, m := range members {
		id := systemID(m)
		mm := Member{MemberID: id, Address: m.Address(), Self: id == inc.system.ID, Node: names[id]}
		if mm.Self {
			mm.Node = n.name
		}
		if mm.Node == "" {
			mm.Node = m.Address()
		}
		if t, ok := gossip[id]; ok {
			mm.LastGossip = &t
		}
		if t, ok := beats[id]; ok {
			mm.LastHeartbeat = &t
		}
		st.Members = append(st.Members, mm)
	}
	sort.Slice(st.Members, func(i, j int) bool { return st.Members[i].Node < st.Members[j].Node })
	return st
}

// names maps member ids to the node names their verdict sets carry.
func (b *board) names() map[string]string {
	b.mu.Lock()
	defer b.mu.Unlock()
	out := make(map[string]string, len(b.heard))
	for id, h := range b.heard {
		out[id] = h.node
	}
	return out
}

// TreeNode is one entry of the supervisor-tree dump for the cluster's actors.
type TreeNode struct {
	Name     string
	Kind     string
	PID      string
	State    any
	Children []TreeNode
}

// Tree describes the cluster's actors for the supervisor-tree dump: the cluster actor system,
// its gossip actor with the members it gossips with, and the verdict board.
func (n *Node) Tree() TreeNode {
	st := n.Status()
	root := TreeNode{Name: "cluster", Kind: "cluster", State: map[string]any{
		"node": st.Node, "member_id": st.MemberID, "generation": st.Generation, "provider": st.Provider,
		"joined": st.Joined, "fenced": st.Fenced, "members": len(st.Members)}}
	if inc := n.current(); inc != nil {
		root.PID = inc.system.Address() + "/" + inc.system.ID
		state := map[string]any{"interval_s": n.cfg.GossipIntervalS.Duration().Seconds()}
		if st.LastGossip != nil {
			state["last_gossip"] = st.LastGossip.UTC().Format(time.RFC3339Nano)
		}
		gossip := TreeNode{Name: "gossip", Kind: "gossip", PID: inc.system.Address() + "/gossip", State: state}
		for _, m := range st.Members {
			gossip.Children = append(gossip.Children, TreeNode{Name: m.Node, Kind: "member", State: m})
		}
		root.Children = append(root.Children, gossip)
	}
	board := TreeNode{Name: "verdicts", Kind: "verdicts", State: map[string]any{"live": len(st.Verdicts)}}
	for _, v := range st.Verdicts {
		board.Children = append(board.Children, TreeNode{Name: v.Engine, Kind: "verdict", State: v})
	}
	root.Children = append(root.Children, board)
	return root
}
