package tests

import (
	"fmt"
	"net/http"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/narwhal-router/narwhal/cluster"
	"github.com/narwhal-router/narwhal/config"
)

// Verdicts that outlive the process that decided them: a node restarted at once, a decider that
// stays down past verdict_ttl_s, and nodes whose etcd went away.

// verdictOn is the live verdict on engine in a node's /cluster, if any.
func (n *narwhalNode) verdictOn(engine string) (cluster.Verdict, bool) {
	n.t.Helper()
	for _, v := range n.status().Verdicts {
		if v.Engine == engine {
			return v, true
		}
	}
	return cluster.Verdict{}, false
}

// ejectedHealthy ejects engine through node's traffic and then heals it: the verdict is all
// that keeps it out (no probe runs: the cluster tests' probe interval is 30 s), and a node that
// starts now passes its own join check on it — only the verdict can keep its clients off it.
func (c *narwhalCluster) ejectedHealthy(node *narwhalNode, engine string) {
	c.t.Helper()
	c.ejectByTraffic(node, engine)
	c.fleet.Engine(engine).ClearFaults()
	for _, n := range c.nodes {
		if n != node {
			n.watchState(engine, "ejected", 2*time.Second)
		}
	}
}

// placesNothingOn sends 10 requests to node, wants each served, and none on engine's decode.
func (c *narwhalCluster) placesNothingOn(node *narwhalNode, engine string) {
	c.t.Helper()
	d := c.fleet.Engine(engine)
	before := d.Stats().DecodeRequests
	noFailures(c.t, node, 10)
	if after := d.Stats().DecodeRequests; after != before {
		c.t.Fatalf("%s placed %d of 10 decode legs on the ejected %s", node.name, after-before, engine)
	}
}

// A node that ejected an engine, killed and restarted at once, applies what its previous
// process decided: the verdict is under its own name, but another process published it.
func TestClusterRestartedNodeAppliesItsPreviousProcesssVerdict(t *testing.T) {
	c := startCluster(t, clusterSetup{nodes: 2})
	a := c.nodes[0]
	c.ejectedHealthy(a, "d0")
	before := a.status().Process

	a.kill()
	a.start()
	a.waitReady()
	st := a.status()
	if st.Process == "" || st.Process == before {
		t.Fatalf("restarted node's process id %q, the previous one's %q: want a new one", st.Process, before)
	}
	a.watchState("d0", "ejected", 3*time.Second)
	if e := a.engine("d0"); e.DecidedBy != a.name {
		t.Fatalf("restarted %s's d0: %+v, want its previous process's verdict (decided by %s)", a.name, e, a.name)
	}
	c.placesNothingOn(a, "d0")
}

// When the deciding node stays down past verdict_ttl_s, the nodes that still hold the engine
// out re-own its verdict: a node restarted after the lapse adopts it and routes around the
// engine.
func TestClusterVerdictOutlivesItsDecidingNode(t *testing.T) {
	c := startCluster(t, clusterSetup{nodes: 3})
	a, b, s := c.nodes[0], c.nodes[1], c.nodes[2]
	c.ejectedHealthy(a, "d0")

	a.kill() // for good
	killed := time.Now()
	s.kill()
	ttl := 2 * time.Second // startCluster's verdict_ttl_s
	// The lapse is the scenario: wait until anything a published has expired.
	eventually(t, 3*ttl, func() bool { return time.Since(killed) > ttl+500*time.Millisecond }, func() string { return "" })
	v, ok := b.verdictOn("d0")
	if !ok || v.Node != b.name || v.DecidedBy() != a.name || v.State != "ejected" {
		t.Fatalf("%s's /cluster on d0 after %s's verdict lapsed: %+v (live %v), want %s's re-owned copy of %s's ejection", b.name, a.name, v, ok, b.name, a.name)
	}
	line := `narwhal_cluster_verdicts_total{direction="reowned",engine="d0",state="ejected"} `
	if m := b.metrics(); !strings.Contains(m, line) {
		t.Fatalf("%s's /metrics lacks %s", b.name, line)
	}

	s.start()
	s.waitReady()
	s.watchState("d0", "ejected", 3*time.Second)
	if e := s.engine("d0"); e.DecidedBy != a.name {
		t.Fatalf("restarted %s's d0: %+v, want %s's decision", s.name, e, a.name)
	}
	c.placesNothingOn(s, "d0")
}

// etcdServer is a real etcd process (Debian's etcd-server; .ci/run installs it).
type etcdServer struct {
	t      *testing.T
	bin    string
	client string
	peer   string
	dir    string
	cmd    *exec.Cmd
}

// runEtcd starts an etcd on free loopback ports and waits until it is healthy.
func runEtcd(t *testing.T) *etcdServer {
	t.Helper()
	bin, err := exec.LookPath("etcd")
	if err != nil {
		t.Skip("etcd is not installed (apt-get install etcd-server): skipping the etcd provider test")
	}
	e := &etcdServer{t: t, bin: bin, client: "http://" + freeTCPAddr(t), peer: "http://" + freeTCPAddr(t),
		dir: filepath.Join(t.TempDir(), "etcd")}
	e.start()
	return e
}

func (e *etcdServer) start() {
	e.t.Helper()
	e.cmd = exec.Command(e.bin, "--name", "default", "--data-dir", e.dir,
		"--listen-client-urls", e.client, "--advertise-client-urls", e.client,
		"--listen-peer-urls", e.peer, "--initial-advertise-peer-urls", e.peer,
		"--initial-cluster", "default="+e.peer, "--log-level", "error")
	if err := e.cmd.Start(); err != nil {
		e.t.Fatalf("start etcd: %v", err)
	}
	cmd := e.cmd
	e.t.Cleanup(func() {
		if cmd.ProcessState == nil {
			cmd.Process.Kill()
			cmd.Wait()
		}
	})
	eventually(e.t, 15*time.Second, func() bool {
		resp, err := http.Get(e.client + "/health")
		if err != nil {
			return false
		}
		resp.Body.Close()
		return resp.StatusCode == 200
	}, func() string { return "etcd not healthy within 15s" })
}

// kill stops etcd at once, as a crash or a partition would.
func (e *etcdServer) kill() {
	e.cmd.Process.Kill()
	e.cmd.Wait()
}

// exitTime sends the node SIGTERM and returns how long its process took to exit; one still
// running after limit is killed and the test fails.
func (n *narwhalNode) exitTime(limit time.Duration) time.Duration {
	n.t.Helper()
	start := time.Now()
	exited, err := stopProcess(n.cmd, limit)
	switch {
	case !exited:
		n.t.Fatalf("%s had not exited %s after SIGTERM; killed it", n.name, limit)
	case err != nil:
		n.t.Fatalf("%s exited with %v after SIGTERM:\n%s", n.name, err, n.log.Bytes())
	}
	return time.Since(start)
}

// A node whose etcd is gone still exits on SIGTERM within server.shutdown_grace_s — from a
// plain stop, and from a rejoin under way (a stall made it leave and join again) — and keeps
// serving meanwhile.
func TestClusterEtcdGoneNodeExitsWithinItsGrace(t *testing.T) {
	etcd := runEtcd(t)
	const grace = 1 * time.Second // startCluster's server.shutdown_grace_s
	const suspectAfter = 800 * time.Millisecond
	c := startCluster(t, clusterSetup{nodes: 3, etcd: []string{etcd.client}, config: func(cfg *config.Config) {
		cfg.Cluster.Etcd.RequestTimeoutS = 0.5
		cfg.Cluster.SuspectAfterS = config.Seconds(suspectAfter.Seconds())
	}})
	b, s := c.nodes[1], c.nodes[2]
	etcd.kill()

	// A plain stop: the deregistration cannot reach etcd.
	took := b.exitTime(grace + 2*time.Second)
	t.Logf("%s exited %s after SIGTERM with etcd gone", b.name, took.Round(time.Millisecond))
	if took > grace+time.Second {
		t.Fatalf("%s took %s to exit with etcd gone, want about server.shutdown_grace_s (%s)", b.name, took, grace)
	}

	// A stall longer than suspect_after_s makes the node leave and join again — with etcd gone.
	// The stall is the scenario: the process stays stopped for twice suspect_after_s, so that
	// its watchdog, the moment it runs again, sees a gap well past the limit.
	stoppedAt := time.Now()
	s.cmd.Process.Signal(syscall.SIGSTOP)
	eventually(t, 2*suspectAfter+5*time.Second, func() bool {
		return signalStopped(t, s.cmd.Process.Pid) && time.Since(stoppedAt) >= 2*suspectAfter
	}, func() string {
		return fmt.Sprintf("%s not stopped for %s (state %s)", s.name, 2*suspectAfter, procField(t, s.cmd.Process.Pid, "State"))
	})
	s.cmd.Process.Signal(syscall.SIGCONT)
	var st cluster.Status
	eventually(t, 5*time.Second, func() bool {
		st = s.status()
		return st.Stalls == 1 && !st.Joined && strings.Contains(st.JoinError, "does not answer")
	}, func() string { return fmt.Sprintf("%s after its stall with etcd gone: %+v", s.name, st) })
	noFailures(t, s, 3) // it routes on its own view meanwhile
	took = s.exitTime(grace + 2*time.Second)
	t.Logf("%s exited %s after SIGTERM while rejoining with etcd gone", s.name, took.Round(time.Millisecond))
	if took > grace+time.Second {
		t.Fatalf("%s took %s to exit while rejoining with etcd gone, want about server.shutdown_grace_s (%s)", s.name, took, grace)
	}

}
