package tests

import (
	"encoding/json"
	"fmt"
	"io"
	"math/rand/v2"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/narwhal-router/narwhal/bench/sim"
	"github.com/narwhal-router/narwhal/cluster"
	"github.com/narwhal-router/narwhal/cluster/certs"
	"github.com/narwhal-router/narwhal/config"
	"github.com/narwhal-router/narwhal/messages"
)

// Several `narwhal serve` processes on loopback in front of one simulated fleet, sharing their
// breakers' verdicts through the cluster. Each node is a real process: a stall is a
// SIGSTOP, a crash a SIGKILL.

// narwhalBinary is the binary the end-to-end tests run: built once per test binary, with the
// clusterfaults tag (the cluster's partition hook, cluster.FaultFileEnv), into a directory
// TestMain removes (removeNarwhalBinary). NARWHAL_TEST_BINARY names another build to run
// instead (an older one, to measure a change against it).
var narwhalBinary = sync.OnceValues(func() (string, error) {
	if bin := os.Getenv("NARWHAL_TEST_BINARY"); bin != "" {
		return bin, nil
	}
	return goBuild("narwhal-faults", "-tags", "clusterfaults")
})

// productBinary is the binary `make build` produces: no build tag.
var productBinary = sync.OnceValues(func() (string, error) { return goBuild("narwhal") })

var binDir = sync.OnceValues(func() (string, error) {
	dir, err := os.MkdirTemp("", "narwhal-e2e-")
	if err == nil {
		binDirMade.Store(&dir)
	}
	return dir, err
})

var binDirMade atomic.Pointer[string]

func goBuild(name string, flags ...string) (string, error) {
	dir, err := binDir()
	if err != nil {
		return "", err
	}
	bin := filepath.Join(dir, name)
	args := append(append([]string{"build"}, flags...), "-o", bin, "github.com/narwhal-router/narwhal")
	if out, err := exec.Command("go", args...).CombinedOutput(); err != nil {
		return "", fmt.Errorf("go build: %v\n%s", err, out)
	}
	return bin, nil
}

// removeNarwhalBinary deletes what narwhalBinary and productBinary built, if anything.
func removeNarwhalBinary(int) {
	if d := binDirMade.Load(); d != nil {
		os.RemoveAll(*d)
	}
}

func buildNarwhal(t *testing.T) string {
	t.Helper()
	bin, err := narwhalBinary()
	if err != nil {
		t.Fatal(err)
	}
	return bin
}

// Ports handed out by freeClusterAddr and freeTCPAddr, drawn below the kernel's ephemeral
// range (32768 and up by default): a port checked free there is not handed to another socket
// bound to :0 (the simulators, other test packages running at the same time) before the node
// binds it.
var (
	portsMu   sync.Mutex
	handedOut = map[string]bool{}
)

// freeClusterAddr is a loopback host:port free for TCP and UDP (the static provider's
// heartbeats share the cluster port).
func freeClusterAddr(t *testing.T) string {
	t.Helper()
	return freePort(t, true)
}

func freeTCPAddr(t *testing.T) string {
	t.Helper()
	return freePort(t, false)
}

func freePort(t *testing.T, udp bool) string {
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
		if udp {
			u, err := net.ListenPacket("udp", addr)
			if err != nil {
				continue
			}
			u.Close()
		}
		handedOut[addr] = true
		return addr
	}
	t.Fatal("no free loopback port")
	return ""
}

// narwhalNode is one `narwhal serve` process.
type narwhalNode struct {
	t      *testing.T
	name   string
	bin    string
	cfg    string // configuration file
	api    string
	admin  string
	cmd    *exec.Cmd
	log    *syncBuffer // stderr: the process log
	out    *syncBuffer // stdout: the access log
	env    []string    // added to the environment
	token  string      // server.admin_token, sent on the admin listener's GETs when set
	client *http.Client
	// cutFile partitions the node from the other nodes while it exists (the cluster's test
	// fault hook, cluster.FaultFileEnv); its clients and the engines still reach it.
	cutFile string
}

type clusterSetup struct {
	nodes int
	// bin is the binary the nodes run; "": narwhalBinary (with the partition hook).
	bin string
	// insecure runs the cluster without cluster.tls (loopback allows it); by default every
	// node has a certificate of the cluster's own CA.
	insecure bool
	// config adjusts every node's configuration (after the defaults below).
	config func(*config.Config)
	// provider: "" for the static seed list, else etcd with these endpoints.
	etcd []string
}

type narwhalCluster struct {
	t     *testing.T
	fleet *sim.Fleet
	nodes []*narwhalNode
	seeds []string // the nodes' cluster addresses
}

func startCluster(t *testing.T, s clusterSetup) *narwhalCluster {
	t.Helper()
	bin := s.bin
	if bin == "" {
		bin = buildNarwhal(t)
	}
	fleet, err := sim.StartFleet(sim.FleetOptions{Prefill: 2, Decode: 2, Engine: sim.Options{Tokens: 2, Models: []string{"sim-model"}}})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { fleet.Close() })
	c := &narwhalCluster{t: t, fleet: fleet}
	var seeds []string
	for range s.nodes {
		seeds = append(seeds, freeClusterAddr(t))
	}
	c.seeds = seeds
	prefix := fmt.Sprintf("/narwhal-e2e-%d", time.Now().UnixNano())
	dir := t.TempDir()
	var names []string
	for i := range s.nodes {
		names = append(names, fmt.Sprintf("node-%d", i))
	}
	creds, err := certs.Write(filepath.Join(dir, "certs"), names, nil)
	if err != nil {
		t.Fatal(err)
	}
	for i := range s.nodes {
		cfg := config.Default()
		cfg.Engines = fleetEngines(fleet)
		pinContract(&cfg)
		cfg.Log.AccessLog = false
		cfg.Server.ShutdownGraceS = 1
		cfg.Server.DrainDelayS = 0
		cfg.Engine.PrefillTimeoutS, cfg.Engine.FirstTokenTimeoutS, cfg.Engine.DecodeReadTimeoutS = 2, 0.5, 2
		cfg.Request.DeadlineS = 10
		cfg.Recovery.EjectAfter = 2
		cfg.Recovery.ProbeIntervalS, cfg.Recovery.ProbeMaxIntervalS = 30, 30 // no probe unless a test asks
		cfg.Server.Listen, cfg.Server.AdminListen = freeTCPAddr(t), freeTCPAddr(t)
		cl := &cfg.Cluster
		cl.Enabled, cl.Name, cl.NodeName, cl.Bind, cl.Seeds = true, "e2e", fmt.Sprintf("node-%d", i), seeds[i], seeds
		cl.GossipIntervalS, cl.HeartbeatIntervalS, cl.SuspectAfterS = 0.1, 0.1, 0.8
		cl.VerdictTTLS, cl.RepublishIntervalS = 2, 0.3
		if !s.insecure {
			f := creds[cl.NodeName]
			cl.TLS = config.ClusterTLS{CertFile: f.Cert, KeyFile: f.Key, CAFile: f.CA}
		}
		if len(s.etcd) > 0 {
			cl.Provider, cl.Seeds = config.ProviderEtcd, nil
			cl.Etcd.Endpoints, cl.Etcd.Prefix = s.etcd, prefix
		}
		if s.config != nil {
			s.config(&cfg)
		}
		path := filepath.Join(dir, fmt.Sprintf("node-%d.yaml", i))
		writeConfig(t, path, cfg)
		c.nodes = append(c.nodes, &narwhalNode{t: t, name: cl.NodeName, bin: bin, cfg: path,
			api: "http://" + cfg.Server.Listen, admin: "http://" + cfg.Server.AdminListen,
			client: &http.Client{Timeout: 15 * time.Second}, cutFile: filepath.Join(dir, fmt.Sprintf("node-%d.cut", i))})
	}
	var wg sync.WaitGroup
	for _, n := range c.nodes {
		wg.Add(1)
		go func() { defer wg.Done(); n.start() }()
	}
	wg.Wait()
	for _, n := range c.nodes {
		n.waitReady()
	}
	c.waitMembers(s.nodes, 10*time.Second)
	return c
}

func (n *narwhalNode) start() {
	n.log, n.out = &syncBuffer{}, &syncBuffer{}
	n.cmd = exec.Command(n.bin, "serve", "--config", n.cfg, "--skip-preflight")
	n.cmd.Env = append(os.Environ(), n.env...)
	if n.cutFile != "" {
		n.cmd.Env = append(n.cmd.Env, cluster.FaultFileEnv+"="+n.cutFile)
	}
	n.cmd.Stdout = n.out
	n.cmd.Stderr = n.log
	if err := n.cmd.Start(); err != nil {
		n.t.Errorf("start %s: %v", n.name, err) // may run on a goroutine of its own: no Fatal
		return
	}
	cmd := n.cmd
	n.t.Cleanup(func() {
		if cmd.ProcessState == nil {
			cmd.Process.Signal(syscall.SIGCONT) // in case a test left it stopped
			stopProcess(cmd, 10*time.Second)
		}
		if n.t.Failed() {
			n.t.Logf("%s log:\n%s", n.name, string(n.log.Bytes()))
		}
	})
}

// cut partitions the node from the other nodes (on) or heals the partition.
func (n *narwhalNode) cut(on bool) {
	n.t.Helper()
	if os.Getenv("NARWHAL_TEST_BINARY") != "" {
		n.t.Skip("the partition hook needs the binary built with -tags clusterfaults")
	}
	var err error
	if on {
		err = os.WriteFile(n.cutFile, nil, 0o600)
	} else {
		err = os.Remove(n.cutFile)
	}
	if err != nil {
		n.t.Fatal(err)
	}
}

func (n *narwhalNode) kill() {
	n.cmd.Process.Kill()
	n.cmd.Wait()
}

// waitReady waits until the node's /readyz says ready and no engine of it is joining (its
// join checks are over: they do not count in what a test measures).
func (n *narwhalNode) waitReady() {
	n.t.Helper()
	eventually(n.t, 20*time.Second, func() bool {
		resp, err := n.client.Get(n.admin + "/readyz")
		if err != nil {
			return false
		}
		resp.Body.Close()
		if resp.StatusCode != 200 {
			return false
		}
		var es []messages.EngineState
		n.getJSON("/engines", &es)
		for _, e := range es {
			if e.State == "joining" {
				return false
			}
		}
		return true
	}, func() string { return n.name + " not ready within 20s:\n" + string(n.log.Bytes()) })
}

func (n *narwhalNode) getJSON(path string, v any) {
	n.t.Helper()
	req, err := http.NewRequest("GET", n.admin+path, nil)
	if err != nil {
		n.t.Fatal(err)
	}
	if n.token != "" {
		req.Header.Set("Authorization", "Bearer "+n.token)
	}
	resp, err := n.client.Do(req)
	if err != nil {
		n.t.Fatalf("%s GET %s: %v", n.name, path, err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != 200 {
		b, _ := io.ReadAll(resp.Body)
		n.t.Fatalf("%s GET %s: %d %s", n.name, path, resp.StatusCode, b)
	}
	if err := json.NewDecoder(resp.Body).Decode(v); err != nil {
		n.t.Fatalf("%s GET %s: %v", n.name, path, err)
	}
}

func (n *narwhalNode) engine(name string) messages.EngineState {
	n.t.Helper()
	var es []messages.EngineState
	n.getJSON("/engines", &es)
	for _, e := range es {
		if e.Name == name {
			return e
		}
	}
	n.t.Fatalf("%s has no engine %q", n.name, name)
	return messages.EngineState{}
}

func (n *narwhalNode) metrics() string {
	n.t.Helper()
	resp, err := n.client.Get(n.admin + "/metrics")
	if err != nil {
		n.t.Fatalf("%s GET /metrics: %v", n.name, err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return string(b)
}

func (n *narwhalNode) status() cluster.Status {
	n.t.Helper()
	var st cluster.Status
	n.getJSON("/cluster", &st)
	return st
}

func (n *narwhalNode) post(path, body string) (int, string) {
	n.t.Helper()
	resp, err := n.client.Post(n.api+path, "application/json", strings.NewReader(body))
	if err != nil {
		n.t.Fatalf("%s POST %s: %v", n.name, path, err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(b)
}

func (n *narwhalNode) adminPost(path string) {
	n.t.Helper()
	resp, err := n.client.Post(n.admin+path, "application/json", nil)
	if err != nil {
		n.t.Fatalf("%s POST %s: %v", n.name, path, err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != 200 {
		b, _ := io.ReadAll(resp.Body)
		n.t.Fatalf("%s POST %s: %d %s", n.name, path, resp.StatusCode, b)
	}
}

func (c *narwhalCluster) waitMembers(want int, within time.Duration, nodes ...*narwhalNode) {
	c.t.Helper()
	if len(nodes) == 0 {
		nodes = c.nodes
	}
	for _, n := range nodes {
		eventually(c.t, within, func() bool { return len(n.status().Members) == want },
			func() string { return fmt.Sprintf("%s does not see %d members: %+v", n.name, want, n.status()) })
	}
}

// watchState polls a node's /engines until the engine is in state and returns when it saw it.
func (n *narwhalNode) watchState(engine, state string, within time.Duration) time.Time {
	n.t.Helper()
	var seen time.Time
	eventually(n.t, within, func() bool {
		if n.engine(engine).State == state {
			seen = time.Now()
			return true
		}
		return false
	}, func() string {
		return fmt.Sprintf("%s: %s not %s within %s: %+v", n.name, engine, state, within, n.engine(engine))
	})
	return seen
}

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

// TestClusterStalledNodeRecovers stops one node's process (SIGSTOP) for 5 s, then for 15 s.
// While it is stopped the others fence it (drop it from their members) and carry on; an engine
// fails meanwhile. Resumed, the node sees its own stall, rejoins under a new identity without a
// restart, and has the verdict it missed before its clients meet the engine.
func TestClusterStalledNodeRecovers(t *testing.T) {
	c := startCluster(t, clusterSetup{nodes: 3})
	a, b, s := c.nodes[0], c.nodes[1], c.nodes[2]
	pid := s.cmd.Process.Pid
	for round, stall := range []time.Duration{5 * time.Second, 15 * time.Second} {
		gen := s.status().Generation
		stopped := time.Now()
		s.cmd.Process.Signal(syscall.SIGSTOP)
		c.waitMembers(2, 3*time.Second, a, b)
		c.ejectByTraffic(a, "d0")
		b.watchState("d0", "ejected", time.Second)
		// The stall is the scenario: the process stays stopped for exactly this long.
		time.Sleep(time.Until(stopped.Add(stall)))
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

// startEtcdServer runs a real etcd on free loopback ports (runEtcd) and returns its client URL.
func startEtcdServer(t *testing.T) string {
	t.Helper()
	return runEtcd(t).client
}

func TestClusterWithEtcdProvider(t *testing.T) {
	c := startCluster(t, clusterSetup{nodes: 3, etcd: []string{startEtcdServer(t)}})
	if st := c.nodes[0].status(); st.Provider != config.ProviderEtcd {
		t.Fatalf("provider %q, want etcd", st.Provider)
	}
	checkFleetWideEjection(t, c, "d0")

	// A 5 s stall outlives the node's etcd lease (3 s): the others drop it, and it rejoins
	// under a new identity when it runs again.
	s := c.nodes[2]
	gen := s.status().Generation
	stopped := time.Now()
	s.cmd.Process.Signal(syscall.SIGSTOP)
	c.waitMembers(2, 8*time.Second, c.nodes[0], c.nodes[1])
	time.Sleep(time.Until(stopped.Add(5 * time.Second))) // the stall is the scenario
	s.cmd.Process.Signal(syscall.SIGCONT)
	c.waitMembers(3, 10*time.Second)
	if st := s.status(); st.Generation != gen+1 || st.Stalls != 1 {
		t.Fatalf("after a 5s stall with etcd: %+v", st)
	}
	s.watchState("d0", "ejected", 2*time.Second)
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
