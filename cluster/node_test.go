package cluster

import (
	"fmt"
	"math/rand/v2"
	"net"
	"sort"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/narwhal-router/narwhal/config"
	"github.com/narwhal-router/narwhal/internal/testwait"
	"github.com/narwhal-router/narwhal/transport/kv"
)

// freeAddr returns a loopback host:port free for both TCP (protoactor's remote) and UDP (the
// static provider's heartbeats).
var (
	portsMu   sync.Mutex
	handedOut = map[string]bool{}
)

// freeAddr returns a loopback host:port free for both TCP (protoactor's remote) and UDP (the
// static provider's heartbeats). It draws below the kernel's ephemeral range (32768 and up by
// default), so that a port checked free is not handed to some other socket bound to :0 — other
// test packages run at the same time — before the node binds it.
func freeAddr(t *testing.T) string {
	t.Helper()
	portsMu.Lock()
	defer portsMu.Unlock()
	for range 1000 {
		addr := fmt.Sprintf("127.0.0.1:%d", 20000+rand.IntN(12000))
		if handedOut[addr] {
			continue
		}
		ln, err := net.Listen("tcp", addr)
		if err != nil {
			continue
		}
		ln.Close()
		u, err := net.ListenPacket("udp", addr)
		if err != nil {
			continue
		}
		u.Close()
		handedOut[addr] = true
		return addr
	}
	t.Fatal("no free port for TCP and UDP")
	return ""
}

func testConfig(bind string, seeds []string) config.Cluster {
	c := config.Default().Cluster
	c.Enabled = true
	c.Name = "test"
	c.Bind = bind
	c.Seeds = seeds
	c.GossipIntervalS = 0.1
	c.HeartbeatIntervalS = 0.1
	c.SuspectAfterS = 0.8
	c.VerdictTTLS = 1.5
	c.RepublishIntervalS = 0.3
	return c
}

// provisioned is c as a node runs it: validated with the rest of a configuration, a fleet of one
// engine making that valid.
func provisioned(c config.Cluster) config.Cluster {
	cfg := config.Default()
	cfg.Cluster = c
	cfg.Engines = []config.Engine{{Name: "e0", URL: "http://127.0.0.1:1", Role: config.RoleBoth}}
	if err := cfg.Validate(kv.Builtin()); err != nil {
		panic(fmt.Sprintf("test cluster configuration: %v", err))
	}
	return cfg.Cluster
}

// waitFor polls cond until it holds or the deadline passes.
func waitFor(t *testing.T, within time.Duration, what string, cond func() bool) {
	t.Helper()
	if !pollUntil(within, cond) {
		t.Fatalf("not within %s: %s", within, what)
	}
}

// pollUntil checks cond every 20 ms until it holds (true) or within has passed (false).
func pollUntil(within time.Duration, cond func() bool) bool {
	return testwait.Within(within, 20*time.Millisecond, cond)
}

func startTrio(t *testing.T, cfg func(bind string, seeds []string) config.Cluster) ([]*proc, []string) {
	addrs := []string{freeAddr(t), freeAddr(t), freeAddr(t)}
	nodes := make([]*proc, 3)
	errs := make([]error, 3)
	var wg sync.WaitGroup
	for i, a := range addrs {
		wg.Add(1)
		go func() { defer wg.Done(); nodes[i], errs[i] = launchProc(t, cfg(a, addrs)) }()
	}
	wg.Wait()
	for _, err := range errs {
		if err != nil {
			t.Fatal(err)
		}
	}
	for _, n := range nodes {
		waitFor(t, 10*time.Second, n.name+" sees 3 members", func() bool { return len(n.status().Members) == 3 })
	}
	return nodes, addrs
}

func TestVerdictReachesEveryNodeAtOnce(t *testing.T) {
	nodes, addrs := startTrio(t, testConfig)
	checkSharing(t, nodes, func() *proc { return startProc(t, testConfig(freeAddr(t), addrs)) })
}

// checkSharing is the contract of verdict sharing, whatever the membership provider: a
// verdict is on every node at once, one node probes, a late joiner receives the live state,
// and a departed node's verdicts expire.
func checkSharing(t *testing.T, nodes []*proc, joinLate func() *proc) {
	a, b, c := nodes[0], nodes[1], nodes[2]
	sent := a.publish(Verdict{Engine: "decode-0", State: StateEjected, Reason: "3 consecutive failures"})
	for _, n := range []*proc{b, c} {
		waitFor(t, time.Second, n.name+" hears the ejection", func() bool {
			_, _, ok := n.find("decode-0", StateEjected)
			return ok
		})
		v, at, _ := n.find("decode-0", StateEjected)
		if v.Node != a.name || v.Reason != "3 consecutive failures" {
			t.Fatalf("%s heard %+v, want %s's verdict and reason", n.name, v, a.name)
		}
		t.Logf("%s heard it %s after it was published", n.name, at.Sub(sent))
	}
	probers := 0
	for _, n := range nodes {
		if n.shouldProbe("decode-0") {
			probers++
		}
	}
	if probers != 1 {
		t.Fatalf("%d nodes would probe decode-0, want exactly 1", probers)
	}
	for _, n := range nodes {
		if !n.shouldProbe("decode-1") {
			t.Fatalf("%s would not probe decode-1, which no verdict covers (a local ejection)", n.name)
		}
	}

	d := joinLate()
	waitFor(t, 10*time.Second, "the late joiner hears the live ejection", func() bool {
		_, _, ok := d.find("decode-0", StateEjected)
		return ok
	})

	a.stop()
	waitFor(t, 5*time.Second, "a's ejection expires on b", func() bool {
		st := b.status()
		return len(st.Verdicts) == 0
	})
	waitFor(t, 5*time.Second, "b drops a from its members", func() bool { return len(b.status().Members) == 3 })
}

// TestPartitionedNodeRejoins cuts a off from its peers (the fault hook: heartbeats and every
// cluster connection, both ways) for longer than peers wait: each side drops the other's
// identity for good (protoactor's blocklist) and keeps deciding on its own view. After the heal
// the smaller side rejoins under a new identity, and each side gets what the other decided.
func TestPartitionedNodeRejoins(t *testing.T) {
	nodes, _ := startTrio(t, testConfig)
	a, b, c := nodes[0], nodes[1], nodes[2]
	rejoined(t, nodes, func(during func()) {
		a.cut(true)
		waitFor(t, 5*time.Second, "the partition splits the members", func() bool {
			return len(b.status().Members) == 2 && len(a.status().Members) == 1
		})
		during()
		published := time.Now()
		a.publish(Verdict{Engine: "decode-8", State: StateQuarantined, Until: time.Now().Add(time.Minute), Reason: "seen by a alone"})
		// a pushes at once and republishes every RepublishIntervalS: once b's side has gossiped
		// for two of those intervals since, the verdict would have crossed if it could.
		settled := published.Add(2 * testConfig("", nil).RepublishIntervalS.Duration())
		waitFor(t, 5*time.Second, "b's side keeps gossiping during the partition", func() bool {
			st := b.status()
			return st.LastGossip != nil && st.LastGossip.After(settled)
		})
		if _, _, ok := b.find("decode-8", StateQuarantined); ok {
			t.Fatal("b heard a's verdict through the partition")
		}
		a.cut(false)
	}, func(st Status) {
		if st.Stalls != 0 {
			t.Fatalf("a partition counted as a stall: %+v", st)
		}
	})
	for _, n := range []*proc{b, c} {
		waitFor(t, 2*time.Second, n.name+" hears what a decided alone", func() bool {
			_, _, ok := n.find("decode-8", StateQuarantined)
			return ok
		})
	}
}

// TestStalledNodeRejoins stops a's process (SIGSTOP) past the suspect period: peers drop it,
// and on SIGCONT it sees its own stall, fences itself and rejoins, without a restart.
func TestStalledNodeRejoins(t *testing.T) {
	nodes, _ := startTrio(t, testConfig)
	a, b := nodes[0], nodes[1]
	rejoined(t, nodes, func(during func()) {
		a.cmd.Process.Signal(syscall.SIGSTOP)
		waitFor(t, 5*time.Second, "b drops the stalled node", func() bool { return len(b.status().Members) == 2 })
		during()
		a.cmd.Process.Signal(syscall.SIGCONT)
	}, func(st Status) {
		if st.Stalls != 1 {
			t.Fatalf("status = %+v, want one stall", st)
		}
	})
}

// rejoined runs cut, which separates a from the others and calls during while it is separated,
// and checks that a comes back under a new identity, alone, and hears at once both the live
// verdict it had and the one b decided while it was away.
func rejoined(t *testing.T, nodes []*proc, cut func(during func()), check func(Status)) {
	t.Helper()
	a, b := nodes[0], nodes[1]
	before := a.status().MemberID
	b.publish(Verdict{Engine: "prefill-0", State: StateEjected, Reason: "operator", Admin: true})
	waitFor(t, time.Second, "a hears b's ejection", func() bool { _, _, ok := a.find("prefill-0", StateEjected); return ok })
	cut(func() {
		b.publish(Verdict{Engine: "decode-9", State: StateEjected, Reason: "seen by b while a was away"})
	})
	waitFor(t, 10*time.Second, "a rejoins and every node sees 3 members again", func() bool {
		if id := a.status().MemberID; id == before || id == "" {
			return false
		}
		for _, n := range nodes {
			if len(n.status().Members) != 3 {
				return false
			}
		}
		return true
	})
	st := a.status()
	if st.Generation != 2 || st.LastRejoin == nil {
		t.Fatalf("status after rejoin = %+v, want a second generation and its reason", st)
	}
	for _, n := range nodes[1:] {
		if st := n.status(); st.Generation != 1 {
			t.Fatalf("%s rejoined too: only the cut-off node should: %+v (why: %+v)", n.name, st, st.LastRejoin)
		}
	}
	check(st)
	// What b decided while a was away reaches a as soon as it is back (typically 0.1 s after
	// the rejoin began; at worst one 2 s retry of a peer's protoactor endpoint writer that
	// failed to connect while a was cut off), and b's live admin ejection, re-published, is on
	// a's board.
	waitFor(t, 3*time.Second, "the rejoined node hears the verdict it missed", func() bool {
		_, _, ok := a.find("decode-9", StateEjected)
		return ok
	})
	_, heard, _ := a.find("decode-9", StateEjected)
	t.Logf("a heard the verdict it missed %s after its rejoin began", heard.Sub(st.LastRejoin.At).Round(time.Millisecond))
	waitFor(t, 2*time.Second, "the rejoined node has b's admin ejection", func() bool {
		for _, v := range a.status().Verdicts {
			if v.Engine == "prefill-0" && v.Admin && v.Node == b.name {
				return true
			}
		}
		return false
	})
}

func TestStatusListsMembersAndVerdicts(t *testing.T) {
	nodes, _ := startTrio(t, testConfig)
	nodes[2].publish(Verdict{Engine: "e", State: StateQuarantined, Until: time.Now().Add(time.Minute)})
	waitFor(t, 2*time.Second, "status shows gossip from both peers", func() bool {
		st := nodes[0].status()
		n := 0
		for _, m := range st.Members {
			if !m.Self && m.LastGossip != nil && m.LastHeartbeat != nil {
				n++
			}
		}
		return n == 2 && len(st.Verdicts) == 1
	})
	st := nodes[0].status()
	var names, want []string
	for _, m := range st.Members {
		names = append(names, m.Node)
	}
	for _, n := range nodes {
		want = append(want, n.name)
	}
	sort.Strings(names)
	sort.Strings(want)
	if fmt.Sprint(names) != fmt.Sprint(want) {
		t.Fatalf("members = %v, want %v", names, want)
	}
	if v := st.Verdicts[0]; v.State != StateQuarantined || v.Node != nodes[2].name {
		t.Fatalf("verdicts = %+v", st.Verdicts)
	}
}

// TestRejoinsReleaseTheOldIncarnation: a node that rejoins over and over (a flapping network)
// leaves nothing of its replaced incarnations running — no actor system, gossip loop, gRPC
// server or connection to a peer — only protoactor's log-throttle timers, which end within
// their 60 s period and then let the old incarnation's memory go.
func TestRejoinsReleaseTheOldIncarnation(t *testing.T) {
	addrs := []string{freeAddr(t), freeAddr(t)}
	a := startProc(t, testConfig(addrs[0], addrs))
	b := startProc(t, testConfig(addrs[1], addrs))
	for _, n := range []*proc{a, b} {
		waitFor(t, 10*time.Second, n.name+" sees 2 members", func() bool { return len(n.status().Members) == 2 })
	}
	rejoin := func() {
		t.Helper()
		if l := a.do(command{Op: "rejoin"}); !l.OK {
			t.Fatalf("rejoin: %+v", l)
		}
		id, since := a.status().MemberID, time.Now()
		// Gossip flows both ways again: each side has its connection to the other, so that
		// every measurement below sees the same set of live connections.
		waitFor(t, 10*time.Second, "b gossips with a's new incarnation, and a with b", func() bool {
			heard := 0
			for _, m := range b.status().Members {
				if m.MemberID == id && m.LastGossip != nil {
					heard++
				}
			}
			for _, m := range a.status().Members {
				if !m.Self && m.LastGossip != nil && m.LastGossip.After(since) {
					heard++
				}
			}
			return heard == 2
		})
	}
	rejoin() // warm up: caches, pools, the first peer connections
	before := a.do(command{Op: "heap"})
	const rejoins = 5
	for range rejoins {
		rejoin()
	}
	after := a.do(command{Op: "heap"})
	t.Logf("after %d rejoins: goroutines %d → %d (%d → %d besides protoactor's log-throttle timers), heap %d → %d bytes",
		rejoins, before.Goroutines, after.Goroutines, before.Running, after.Running, before.Heap, after.Heap)
	// A replaced incarnation left running would add at least its heartbeat loops, its gRPC
	// server and its connections per rejoin; the bound allows for a connection being replaced.
	if after.Running > before.Running+4 {
		t.Fatalf("goroutines besides throttle timers %d → %d over %d rejoins: old incarnations are left running:\n%s",
			before.Running, after.Running, rejoins, after.Stacks)
	}
}
