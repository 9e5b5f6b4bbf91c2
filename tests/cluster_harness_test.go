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
	cmd, log, out := n.cmd, n.log, n.out // this process's, not a restarted one's
	n.t.Cleanup(func() {
		if cmd.ProcessState == nil {
			cmd.Process.Signal(syscall.SIGCONT) // in case a test left it stopped
			stopProcess(cmd, 10*time.Second)
		}
		if n.t.Failed() {
			n.t.Logf("%s (pid %d) log:\n%s", n.name, cmd.Process.Pid, log.Bytes())
			n.t.Logf("%s (pid %d) access log, requests that did not end 200:\n%s", n.name, cmd.Process.Pid, not200(out.Bytes()))
		}
	})
}

// not200 keeps the access-log lines of requests whose status was not 200 or whose outcome was
// not "ok": what a failed test wants to see of a node's traffic.
func not200(access []byte) string {
	var b strings.Builder
	for _, line := range strings.Split(string(access), "\n") {
		if line != "" && (!strings.Contains(line, `"status":200`) || !strings.Contains(line, `"outcome":"ok"`)) {
			b.WriteString(line)
			b.WriteByte('\n')
		}
	}
	return b.String()
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
