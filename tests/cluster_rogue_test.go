package tests

import (
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/narwhal-router/narwhal/cluster"
	"github.com/narwhal-router/narwhal/cluster/certs"
	"github.com/narwhal-router/narwhal/config"
)

// rogueNode is a real `narwhal serve` process configured for the same cluster (name, seeds) as
// c's nodes, with the credentials given (none: the cluster's port on loopback, which config
// allows without them).
func rogueNode(t *testing.T, c *narwhalCluster, name string, creds config.ClusterTLS) *narwhalNode {
	t.Helper()
	cfg := config.Default()
	cfg.Engines = fleetEngines(c.fleet)
	pinContract(&cfg)
	cfg.Log.AccessLog = false
	cfg.Recovery.ProbeIntervalS, cfg.Recovery.ProbeMaxIntervalS = 30, 30
	cl := &cfg.Cluster
	cl.Enabled, cl.Name, cl.NodeName, cl.Bind = true, "e2e", name, freeClusterAddr(t)
	cl.Seeds = append([]string{cl.Bind}, c.seeds...)
	cl.GossipIntervalS, cl.HeartbeatIntervalS, cl.SuspectAfterS = 0.1, 0.1, 0.8
	cl.VerdictTTLS, cl.RepublishIntervalS = 2, 0.3
	cl.TLS = creds
	n := routerProcess(t, cfg)
	n.name = name
	return n
}

// A process that reaches the cluster port with the same cluster: section but without a
// certificate the cluster's CA signed — none at all, or one from another CA — cannot join,
// gossip or publish a verdict: its admin ejects an engine, no real node hears of it, and no
// healthy engine moves (issue 26, items 4 and 8).
func TestRogueNodeCannotJoinTheCluster(t *testing.T) {
	c := startCluster(t, clusterSetup{nodes: 2})
	a, b := c.nodes[0], c.nodes[1]
	rssBefore := map[string]int64{a.name: a.rss(), b.name: b.rss()}
	other, err := certs.Write(filepath.Join(t.TempDir(), "other-ca"), []string{"rogue"}, nil)
	if err != nil {
		t.Fatal(err)
	}
	rogues := []*narwhalNode{
		rogueNode(t, c, "rogue-plain", config.ClusterTLS{}),
		rogueNode(t, c, "rogue-other-ca", config.ClusterTLS{CertFile: other["rogue"].Cert, KeyFile: other["rogue"].Key, CAFile: other["rogue"].CA}),
	}
	for _, r := range rogues {
		r.adminPost("/engines/d0/eject?reason=rogue")
		r.watchState("d0", "ejected", time.Second)
	}
	// The rogues' heartbeats reach the real nodes and are refused, for a while: long enough for
	// several rounds of the rogues' gossip and re-publication (0.1 s and 0.3 s).
	for _, n := range []*narwhalNode{a, b} {
		eventually(t, 10*time.Second, func() bool { return n.status().RejectedHeartbeats >= 20 },
			func() string { return fmt.Sprintf("%s refused %d heartbeats", n.name, n.status().RejectedHeartbeats) })
	}
	for _, n := range []*narwhalNode{a, b} {
		st := n.status()
		if len(st.Members) != 2 || !st.Authenticated {
			t.Fatalf("%s lists %d members (authenticated %v), want its 2 real ones: %+v", n.name, len(st.Members), st.Authenticated, st.Members)
		}
		for _, m := range st.Members {
			if strings.HasPrefix(m.Node, "rogue") {
				t.Fatalf("%s lists the rogue %s as a member", n.name, m.Node)
			}
		}
		if e := n.engine("d0"); e.State != "admitted" || e.DecidedBy != "" {
			t.Fatalf("%s applied a rogue's verdict: %+v", n.name, e)
		}
		for _, v := range st.Verdicts {
			if strings.HasPrefix(v.Node, "rogue") {
				t.Fatalf("%s holds a rogue's verdict: %+v", n.name, v)
			}
		}
		if grown := n.rss() - rssBefore[n.name]; grown > 30<<20 {
			t.Fatalf("%s grew %s while the rogues knocked", n.name, mib(grown))
		}
	}
	for _, r := range rogues {
		if st := r.status(); len(st.Members) != 1 {
			t.Fatalf("%s sees %d members, want itself alone: %+v", r.name, len(st.Members), st.Members)
		}
	}
	// The real nodes still place on d0: no healthy engine moved.
	before := c.fleet.Engine("d0").Stats().DecodeRequests
	noFailures(t, a, 6)
	noFailures(t, b, 6)
	if c.fleet.Engine("d0").Stats().DecodeRequests == before {
		t.Fatal("the real nodes stopped placing on d0")
	}
	// And the real cluster still works: an ejection on one reaches the other.
	a.adminPost("/engines/p1/eject?reason=maintenance")
	b.watchState("p1", "ejected", 2*time.Second)
}

// The binary `make build` produces has no partition hook: NARWHAL_CLUSTER_FAULT_FILE naming a
// file that exists cuts nothing (issue 26, item 5).
func TestProductBinaryIgnoresTheFaultHook(t *testing.T) {
	bin, err := productBinary()
	if err != nil {
		t.Fatal(err)
	}
	c := startCluster(t, clusterSetup{nodes: 2, bin: bin})
	for _, n := range c.nodes {
		n.cut(true) // with the hook: partitioned from now on
	}
	// Heartbeats and gossip go on: each node hears its peer well past the cut (three suspect
	// periods of 0.8 s), and never drops it.
	cut := time.Now()
	for _, n := range c.nodes {
		eventually(t, 10*time.Second, func() bool {
			st := n.status()
			if len(st.Members) != 2 {
				t.Fatalf("%s dropped its peer after the cut: %+v", n.name, st.Members)
			}
			for _, m := range st.Members {
				if !m.Self && (m.LastHeartbeat == nil || m.LastGossip == nil || m.LastHeartbeat.Before(cut.Add(2400*time.Millisecond)) ||
					m.LastGossip.Before(cut.Add(2400*time.Millisecond))) {
					return false
				}
			}
			return true
		}, func() string { return fmt.Sprintf("%s: %+v", n.name, n.status().Members) })
	}
	checkFleetWideEjection(t, c, "d0")
}

// goroutines counts the process's goroutines from its profile, less protoactor's log-throttle
// timers (each lives its 60 s period after a throttled message, then ends).
func (n *narwhalNode) goroutines() int {
	n.t.Helper()
	resp, err := n.client.Get(n.admin + "/debug/pprof/goroutine?debug=1")
	if err != nil {
		n.t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	total := 0
	for _, g := range strings.Split(string(b), "\n\n")[1:] {
		if strings.Contains(g, "protoactor-go") && strings.Contains(g, "/actor/throttler.go") {
			continue
		}
		var k int
		fmt.Sscanf(g, "%d @", &k)
		total += k
	}
	return total
}

// heapInuse is the process's Go heap in use right after a garbage collection (the pprof heap
// endpoint runs one when asked): what the process holds, without the pages the runtime has
// not yet handed back to the kernel that RSS still counts.
func (n *narwhalNode) heapInuse() int64 {
	n.t.Helper()
	resp, err := n.client.Get(n.admin + "/debug/pprof/heap?debug=1&gc=1")
	if err != nil {
		n.t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	_, rest, ok := strings.Cut(string(b), "# HeapInuse = ")
	if !ok {
		n.t.Fatalf("no HeapInuse in %s's heap profile", n.name)
	}
	var v int64
	fmt.Sscanf(rest, "%d", &v)
	return v
}

// 40 partition flaps leave both nodes' memory and goroutines where they were, give or take
// protoactor's log-throttle timers (issue 26, item 5: a peer grew from 33 to 173 MiB and kept
// gRPC goroutines). Either node may be the one that takes a new identity after a flap, so
// both are measured: the one that stays must not keep what it knew of the other's old
// identities, and the one that rejoins must not keep its retired incarnations' connections.
func TestPartitionFlapsLeaveThePeerAsItWas(t *testing.T) {
	c := startCluster(t, clusterSetup{nodes: 2, config: func(cfg *config.Config) {
		cfg.Cluster.HeartbeatIntervalS, cfg.Cluster.SuspectAfterS = 0.1, 0.6
	}})
	a, b := c.nodes[0], c.nodes[1]
	// hears reports whether x lists y's current incarnation and has had gossip from it.
	hears := func(x, y cluster.Status) bool {
		for _, m := range x.Members {
			if m.MemberID == y.MemberID && m.LastGossip != nil {
				return true
			}
		}
		return false
	}
	flap := func() {
		t.Helper()
		genA, genB := a.status().Generation, b.status().Generation
		b.cut(true)
		c.waitMembers(1, 5*time.Second, a)
		b.cut(false)
		// Either side may be the one that rejoins: the first to hear that the other dropped
		// its identity takes a new incarnation, and the other then has nothing to replace.
		eventually(t, 20*time.Second, func() bool {
			sa, sb := a.status(), b.status()
			return (sa.Generation > genA || sb.Generation > genB) && hears(sa, sb) && hears(sb, sa)
		}, func() string {
			return fmt.Sprintf("no new incarnation gossiping both ways after the cut:\na: %+v\nb: %+v", a.status(), b.status())
		})
	}
	flap() // warm up: pools, the first connections of a second incarnation
	type usage struct {
		rss, heap  int64
		goroutines int
	}
	measure := func(n *narwhalNode) usage { return usage{n.rss(), n.heapInuse(), n.goroutines()} }
	before := map[*narwhalNode]usage{a: measure(a), b: measure(b)}
	gen0 := map[*narwhalNode]int{a: a.status().Generation, b: b.status().Generation}
	flaps := 40
	if n, err := strconv.Atoi(os.Getenv("NARWHAL_TEST_FLAPS")); err == nil {
		flaps = n
	}
	start := time.Now()
	for range flaps {
		flap()
	}
	t.Logf("%d flaps in %s", flaps, time.Since(start).Round(time.Second))
	for _, n := range c.nodes {
		was := before[n]
		// Connections still closing finish (a bounded wait for a count to come back).
		eventually(t, 30*time.Second, func() bool { return n.goroutines() <= was.goroutines+4 }, func() string {
			resp, _ := n.client.Get(n.admin + "/debug/pprof/goroutine?debug=1")
			prof, _ := io.ReadAll(resp.Body)
			resp.Body.Close()
			return fmt.Sprintf("%s: goroutines %d → %d after %d flaps (protoactor's log-throttle timers aside):\n%s", n.name, was.goroutines, n.goroutines(), flaps, prof)
		})
		// protoactor's log-throttle timers hold each retired incarnation's actor system (about
		// 2.5 MB of heap) for their 60 s period, so a node that rejoined in the last minute
		// still holds those for a while; then it is back where it was. The leak this guards
		// against grew the peer by 140 MiB over 40 flaps and never gave it back.
		eventually(t, 100*time.Second, func() bool { return n.heapInuse() <= was.heap+16<<20 }, func() string {
			return fmt.Sprintf("%s: Go heap in use after a GC grew %s → %s over %d flaps", n.name, mib(was.heap), mib(n.heapInuse()), flaps)
		})
		t.Logf("%s: %d rejoins; RSS %s → %s, heap in use %s → %s, goroutines %d → %d (log-throttle timers aside)",
			n.name, n.status().Generation-gen0[n], mib(was.rss), mib(n.rss()), mib(was.heap), mib(n.heapInuse()), was.goroutines, n.goroutines())
	}
	noFailures(t, a, 3)
}
