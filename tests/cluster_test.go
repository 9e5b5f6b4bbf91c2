package tests

import (
	"io"
	"strings"
	"testing"
	"time"

	"github.com/narwhal-router/narwhal/config"
)

// ejectByTraffic makes d0 hang and sends requests to node until it ejects d0 (eject_after 2);
// it returns when node's breaker ejected it.
func (c *narwhalCluster) ejectByTraffic(node *narwhalNode, engine string) time.Time {
	c.t.Helper()
	if err := c.fleet.Engine(engine).InjectFault("decode.hang_first_token", 1_000_000); err != nil {
		c.t.Fatal(err)
	}
	deadline := time.Now().Add(15 * time.Second)
	for node.engine(engine).State != "ejected" {
		if time.Now().After(deadline) {
			c.t.Fatalf("%s never ejected %s: %+v", node.name, engine, node.engine(engine))
		}
		node.post("/v1/completions", shortPrompt)
	}
	e := node.engine(engine)
	if e.EjectedAt == nil || e.DecidedBy != "" {
		c.t.Fatalf("%s's own ejection of %s reads %+v", node.name, engine, e)
	}
	return *e.EjectedAt
}

// noFailures sends n requests to node and wants every one to succeed.
func noFailures(t *testing.T, node *narwhalNode, n int) {
	t.Helper()
	for i := range n {
		if status, body := node.post("/v1/completions", shortPrompt); status != 200 {
			t.Fatalf("%s request %d: %d %s", node.name, i, status, body)
		}
	}
}

// checkFleetWideEjection is the heart of the cluster: an engine one node saw failing is out of
// placement on every node within a second, and their clients never meet it.
func checkFleetWideEjection(t *testing.T, c *narwhalCluster, engine string) {
	t.Helper()
	a, others := c.nodes[0], c.nodes[1:]
	d := c.fleet.Engine(engine)
	ejected := c.ejectByTraffic(a, engine)
	for _, n := range others {
		seen := n.watchState(engine, "ejected", 2*time.Second)
		t.Logf("%s showed %s ejected %s after %s ejected it", n.name, engine, seen.Sub(ejected), a.name)
		if lag := seen.Sub(ejected); lag > time.Second {
			t.Fatalf("%s showed %s ejected %s after %s ejected it, want within 1s", n.name, engine, lag, a.name)
		}
		e := n.engine(engine)
		if e.DecidedBy != a.name || e.Streak != 0 {
			t.Fatalf("%s's %s: %+v, want decided by %s and no failure of its own", n.name, engine, e, a.name)
		}
	}
	counted := func(n *narwhalNode, direction string) {
		t.Helper()
		line := `narwhal_cluster_verdicts_total{direction="` + direction + `",engine="` + engine + `",state="ejected"} 1`
		eventually(t, 3*time.Second, func() bool { return strings.Contains(n.metrics(), line) },
			func() string { return n.name + "'s /metrics lacks " + line })
	}
	counted(a, "published")
	for _, n := range others {
		counted(n, "applied")
	}
	before := d.Stats().DecodeRequests
	for _, n := range others {
		noFailures(t, n, 10)
	}
	if after := d.Stats().DecodeRequests; after != before {
		t.Fatalf("the other nodes still placed %d decode legs on the ejected %s", after-before, engine)
	}
}

func TestClusterEjectionReachesEveryNode(t *testing.T) {
	c := startCluster(t, clusterSetup{nodes: 3})
	checkFleetWideEjection(t, c, "d0")

	// A node killed and restarted (a new process, a new member identity) gets the live
	// verdict when it joins, before its clients could meet the engine.
	b := c.nodes[1]
	b.kill()
	c.waitMembers(2, 5*time.Second, c.nodes[0], c.nodes[2])
	b.start()
	b.waitReady()
	b.watchState("d0", "ejected", 3*time.Second)
	c.waitMembers(3, 5*time.Second)
	before := c.fleet.Engine("d0").Stats().DecodeRequests
	noFailures(t, b, 10)
	if after := c.fleet.Engine("d0").Stats().DecodeRequests; after != before {
		t.Fatalf("the restarted node placed %d decode legs on the ejected d0", after-before)
	}
	if st := b.status(); st.Generation != 1 || len(st.Verdicts) != 1 || st.Verdicts[0].Node != c.nodes[0].name {
		t.Fatalf("restarted node's /cluster: %+v", st)
	}
}

func TestClusterAdminEjectHoldsOnAllNodes(t *testing.T) {
	c := startCluster(t, clusterSetup{nodes: 3})
	a, b, cc := c.nodes[0], c.nodes[1], c.nodes[2]
	a.adminPost("/engines/p1/eject?reason=maintenance")
	for _, n := range []*narwhalNode{b, cc} {
		n.watchState("p1", "ejected", time.Second)
		if e := n.engine("p1"); e.DecidedBy != a.name {
			t.Fatalf("%s's p1: %+v, want the operator's ejection from %s", n.name, e, a.name)
		}
	}
	p1 := c.fleet.Engine("p1")
	before := p1.Stats().PrefillRequests
	noFailures(t, b, 6)
	noFailures(t, cc, 6)
	if after := p1.Stats().PrefillRequests; after != before {
		t.Fatalf("%d prefill legs reached the operator-ejected p1", after-before)
	}

	// Readmitting on another node holds on all, the deciding node included.
	b.adminPost("/engines/p1/readmit?force=true")
	for _, n := range []*narwhalNode{a, cc} {
		n.watchState("p1", "admitted", time.Second)
	}
}

// TestClusterOneNodeProbes: with three nodes an ejected engine is probed by one of them per
// interval, and its successful probe readmits the engine on all.
func TestClusterOneNodeProbes(t *testing.T) {
	const interval = 0.4
	c := startCluster(t, clusterSetup{nodes: 3, config: func(cfg *config.Config) {
		cfg.Recovery.ProbeIntervalS, cfg.Recovery.ProbeMaxIntervalS = interval, interval
	}})
	d0 := c.fleet.Engine("d0")
	c.ejectByTraffic(c.nodes[0], "d0")
	start, before := time.Now(), d0.Stats().DecodeRequests
	// Every decode leg d0 sees from now on is a probe (clients send nothing).
	eventually(t, 5*time.Second, func() bool { return time.Since(start) > 2*time.Second }, func() string { return "" })
	probes := d0.Stats().DecodeRequests - before
	window := time.Since(start).Seconds()
	if most := int64(window/interval) + 2; probes < 1 || probes > most {
		t.Fatalf("%d probes of d0 in %.1fs at a %.1fs interval: want one prober (1..%d), not one per node", probes, window, interval, most)
	}

	d0.ClearFaults()
	var prober string
	for _, n := range c.nodes {
		n.watchState("d0", "admitted", 3*time.Second)
		if e := n.engine("d0"); e.DecidedBy == "" {
			prober = n.name
		}
	}
	for _, n := range c.nodes {
		if e := n.engine("d0"); n.name != prober && e.DecidedBy != prober {
			t.Fatalf("%s readmitted d0 on %q's word, want the prober %s's: %+v", n.name, e.DecidedBy, prober, e)
		}
	}
}

// TestClusterLoneNodeKeepsServing: a node that can reach no peer — they died, or a partition
// cut it off; from inside the two look alike — routes on its own view, decides and probes alone,
// and the nodes that come back get the state it decided meanwhile.
func TestClusterLoneNodeKeepsServing(t *testing.T) {
	c := startCluster(t, clusterSetup{nodes: 3, config: func(cfg *config.Config) {
		cfg.Recovery.ProbeIntervalS, cfg.Recovery.ProbeMaxIntervalS = 0.3, 0.3
	}})
	a := c.nodes[0]
	for _, n := range c.nodes[1:] {
		n.kill()
	}
	c.waitMembers(1, 5*time.Second, a)
	noFailures(t, a, 5)

	// Its own evidence ejects d0, its own probe readmits it.
	c.ejectByTraffic(a, "d0")
	c.fleet.Engine("d0").ClearFaults()
	a.watchState("d0", "admitted", 3*time.Second)

	// What it decides alone reaches the nodes that return.
	c.ejectByTraffic(a, "d1")
	for _, n := range c.nodes[1:] {
		n.start()
	}
	for _, n := range c.nodes[1:] {
		n.waitReady()
		n.watchState("d1", "ejected", 3*time.Second)
		if e := n.engine("d1"); e.DecidedBy != a.name {
			t.Fatalf("%s's d1: %+v, want %s's verdict", n.name, e, a.name)
		}
	}
	c.waitMembers(3, 5*time.Second)

	// The tree dump shows the cluster's actors: gossip with its members, and the verdicts.
	resp, err := a.client.Get(a.admin + "/debug/tree?format=text")
	if err != nil {
		t.Fatal(err)
	}
	tree, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	for _, want := range []string{"cluster [cluster]", "gossip [gossip]", "node-1 [member]", "node-2 [member]", "verdicts [verdicts]", "d1 [verdict] state="} {
		if !strings.Contains(string(tree), want) {
			t.Fatalf("tree dump lacks %q:\n%s", want, tree)
		}
	}
}
