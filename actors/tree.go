package actors

import (
	"context"
	"fmt"
	"sort"
	"strings"
	"time"

	"github.com/narwhal-router/narwhal/cluster"
	"github.com/narwhal-router/narwhal/messages"
)

// TreeNode is one actor in a supervisor-tree dump.
type TreeNode struct {
	Name     string     `json:"name"`
	Kind     string     `json:"kind"` // guardian, pool, engine, requests, request
	PID      string     `json:"pid,omitempty"`
	State    any        `json:"state,omitempty"`
	Children []TreeNode `json:"children,omitempty"`
}

// Tree is a consistent-per-actor dump of the supervisor tree: each actor reports its own state
// from inside its mailbox, so no state is read while it changes.
func (r *Router) Tree(ctx context.Context) (TreeNode, error) {
	engines, err := r.describeEngines(ctx)
	if err != nil {
		return TreeNode{}, err
	}
	pool := TreeNode{Name: "engines", Kind: "pool", PID: r.pool.Id}
	for _, e := range engines {
		pool.Children = append(pool.Children, TreeNode{Name: e.state.Name, Kind: "engine", PID: pidOf(e.st.view).Id, State: e.state})
	}
	reqs := r.Requests(ctx)
	sort.Slice(reqs, func(i, j int) bool { return reqs[i].ElapsedS > reqs[j].ElapsedS })
	requests := TreeNode{Name: "requests", Kind: "requests"}
	for _, q := range reqs {
		q := q
		requests.Children = append(requests.Children, TreeNode{Name: q.ID, Kind: "request", State: &q})
	}
	children := []TreeNode{pool, requests}
	if r.cluster != nil {
		children = append(children, clusterTree(r.cluster.Tree()))
	}
	return TreeNode{Name: "narwhal", Kind: "guardian", PID: r.guardian.Id,
		State:    map[string]any{"time": time.Now().UTC().Format(time.RFC3339Nano), "in_flight": len(reqs)},
		Children: children}, nil
}

// Text renders the tree indented, one actor per line, for terminals and SIGUSR1.
func (n TreeNode) Text() string {
	var b strings.Builder
	n.text(&b, "")
	return b.String()
}

func (n TreeNode) text(b *strings.Builder, indent string) {
	fmt.Fprintf(b, "%s%s [%s]", indent, n.Name, n.Kind)
	if s := stateLine(n.State); s != "" {
		b.WriteString(" ")
		b.WriteString(s)
	}
	b.WriteByte('\n')
	for _, c := range n.Children {
		c.text(b, indent+"  ")
	}
}

func stateLine(state any) string {
	switch s := state.(type) {
	case *messages.EngineState:
		line := fmt.Sprintf("role=%s state=%s source=%s streak=%d reserved=prefill:%d,decode:%d",
			s.Role, s.State, s.Source, s.Streak, s.Reserved.Prefill, s.Reserved.Decode)
		if s.QuarantineEnds != nil {
			line += " quarantine_until=" + s.QuarantineEnds.UTC().Format(time.RFC3339Nano)
		}
		if s.EjectedBy != "" {
			line += fmt.Sprintf(" ejected_by=%s reason=%q", s.EjectedBy, s.EjectReason)
		}
		if s.NextProbe != nil {
			line += " next_probe=" + s.NextProbe.UTC().Format(time.RFC3339Nano)
		}
		if p := s.LastProbe; p != nil {
			line += fmt.Sprintf(" last_probe=%s(%s: %s)", p.Result, p.Mode, p.Reason)
		}
		if p := s.JoinCheck; p != nil && (s.State == "joining" || s.LastProbe == nil) {
			line += fmt.Sprintf(" join_check=%s(%s: %s)", p.Result, p.Mode, p.Reason)
		}
		return line
	case *messages.RequestState:
		line := fmt.Sprintf("phase=%s attempt=%d endpoint=%s model=%s", s.Phase, s.Attempt, s.Endpoint, s.Model)
		if s.Producer != "" {
			line += " producer=" + s.Producer + " consumer=" + s.Consumer
		}
		return line + fmt.Sprintf(" handoff_age=%.3fs reserved=prefill:%d,decode:%d elapsed=%.3fs",
			s.HandoffAgeS, s.Reserved.Prefill, s.Reserved.Decode, s.ElapsedS)
	case map[string]any:
		if _, ok := s["in_flight"]; ok {
			return fmt.Sprintf("in_flight=%v", s["in_flight"])
		}
		keys := make([]string, 0, len(s))
		for k := range s {
			keys = append(keys, k)
		}
		sort.Strings(keys)
		parts := make([]string, 0, len(keys))
		for _, k := range keys {
			parts = append(parts, fmt.Sprintf("%s=%v", k, s[k]))
		}
		return strings.Join(parts, " ")
	case cluster.Member:
		line := fmt.Sprintf("member_id=%s address=%s self=%t", s.MemberID, s.Address, s.Self)
		if s.LastGossip != nil {
			line += " last_gossip=" + s.LastGossip.UTC().Format(time.RFC3339Nano)
		}
		return line
	case cluster.Verdict:
		line := fmt.Sprintf("state=%s node=%s decided=%s", s.State, s.Node, s.Decided.UTC().Format(time.RFC3339Nano))
		if s.Admin {
			line += " admin=true"
		}
		if s.Reason != "" {
			line += fmt.Sprintf(" reason=%q", s.Reason)
		}
		return line
	}
	return ""
}

// clusterTree converts the cluster's own tree entries.
func clusterTree(n cluster.TreeNode) TreeNode {
	out := TreeNode{Name: n.Name, Kind: n.Kind, PID: n.PID, State: n.State}
	for _, c := range n.Children {
		out.Children = append(out.Children, clusterTree(c))
	}
	return out
}
