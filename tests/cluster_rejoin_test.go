package tests

import (
	"syscall"
	"testing"
	"time"

	"github.com/narwhal-router/narwhal/internal/testwait"
)

// TestClusterStalledNodeRecovers stops one node's process (SIGSTOP) twice: until the others
// fenced it and ejected an engine without it, then for 15 s.
// While it is stopped the others fence it (drop it from their members) and carry on; an engine
// fails meanwhile. Resumed, the node sees its own stall, rejoins under a new identity without a
// restart, and has the verdict it missed before its clients meet the engine.
func TestClusterStalledNodeRecovers(t *testing.T) {
	c := startCluster(t, clusterSetup{nodes: 3})
	a, b, s := c.nodes[0], c.nodes[1], c.nodes[2]
	pid := s.cmd.Process.Pid
	// A zero stall ends as soon as the peers fenced the node and decided without it; 15 s is a
	// stall long past every membership and gossip timeout, the scenario itself rather than a
	// wait for something to happen.
	for round, stall := range []time.Duration{0, 15 * time.Second} {
		gen := s.status().Generation
		stopped := time.Now()
		s.cmd.Process.Signal(syscall.SIGSTOP)
		c.waitMembers(2, 3*time.Second, a, b)
		c.ejectByTraffic(a, "d0")
		b.watchState("d0", "ejected", time.Second)
		// For the rest of the stall the peers keep the stopped node out.
		fenced := func() bool { return len(a.status().Members) == 2 && len(b.status().Members) == 2 }
		if !testwait.Holds(time.Until(stopped.Add(stall)), 200*time.Millisecond, fenced) {
			t.Fatalf("round %d: a peer took the stopped node back during its %s stall: %+v / %+v", round, stall, a.status().Members, b.status().Members)
		}
		s.cmd.Process.Signal(syscall.SIGCONT)

		c.waitMembers(3, 8*time.Second)
		st := s.status()
		if st.Generation != gen+1 || st.Stalls != round+1 || s.cmd.Process.Pid != pid {
			t.Fatalf("after a %s stall: %+v, want generation %d and %d stall(s) in the same process", stall, st, gen+1, round+1)
		}
		// The verdict it missed arrives as soon as it is back: the peers' connections to its
		// old incarnation were cut when it left, and they redial its port at once (at worst
		// after one 2 s retry of protoactor's endpoint writer).
		seen := s.watchState("d0", "ejected", 3*time.Second)
		t.Logf("after a %s stall: d0 seen ejected on the stalled node %s after its rejoin began (polled once /cluster lists 3 members, past protoactor's 1 s start-up pause)", stall, seen.Sub(st.LastRejoin.At).Round(time.Millisecond))
		before := c.fleet.Engine("d0").Stats().DecodeRequests
		noFailures(t, s, 10)
		if after := c.fleet.Engine("d0").Stats().DecodeRequests; after != before {
			t.Fatalf("after a %s stall the node placed %d decode legs on the ejected d0", stall, after-before)
		}
		// Back to a healthy fleet for the next round: an operator readmits d0 on one node.
		c.fleet.Engine("d0").ClearFaults()
		b.adminPost("/engines/d0/readmit?force=true")
		for _, n := range c.nodes {
			n.watchState("d0", "admitted", time.Second)
		}
	}
}

// TestClusterPartitionedNodeRecovers cuts one node off from the other two (the cluster's test
// fault hook: membership heartbeats and gossip connections, both ways; clients and engines
// still reach every node). Alone it keeps serving on its own view; meanwhile an engine fails and
// the other side ejects it. When the partition heals, the cut-off node — the smaller side —
// rejoins under a new identity and has the verdict before its clients meet the engine.
func TestClusterPartitionedNodeRecovers(t *testing.T) {
	c := startCluster(t, clusterSetup{nodes: 3})
	a, b, s := c.nodes[0], c.nodes[1], c.nodes[2]
	s.cut(true)
	c.waitMembers(2, 5*time.Second, a, b)
	c.waitMembers(1, 5*time.Second, s)
	noFailures(t, s, 5) // a node never stops routing because its peers are unreachable

	c.ejectByTraffic(a, "d0")
	b.watchState("d0", "ejected", time.Second)
	if e := s.engine("d0"); e.State == "ejected" {
		t.Fatalf("the cut-off node heard the ejection through the partition: %+v", e)
	}

	s.cut(false)
	c.waitMembers(3, 8*time.Second)
	st := s.status()
	if st.Generation != 2 || st.Stalls != 0 || st.LastRejoin == nil {
		t.Fatalf("after the partition: %+v, want a second generation, no stall", st)
	}
	for _, n := range []*narwhalNode{a, b} {
		if st := n.status(); st.Generation != 1 {
			t.Fatalf("%s rejoined too, want only the smaller side to: %+v", n.name, st)
		}
	}
	seen := s.watchState("d0", "ejected", 3*time.Second)
	t.Logf("d0 seen ejected on the healed node %s after its rejoin began (polled once /cluster lists 3 members, past protoactor's 1 s start-up pause)", seen.Sub(st.LastRejoin.At).Round(time.Millisecond))
	if e := s.engine("d0"); e.DecidedBy != a.name {
		t.Fatalf("healed node's d0: %+v, want %s's verdict", e, a.name)
	}
	before := c.fleet.Engine("d0").Stats().DecodeRequests
	noFailures(t, s, 10)
	if after := c.fleet.Engine("d0").Stats().DecodeRequests; after != before {
		t.Fatalf("after the partition the node placed %d decode legs on the ejected d0", after-before)
	}
}
