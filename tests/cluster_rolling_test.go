package tests

import (
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"net/url"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/narwhal-router/narwhal/bench/sim"
	"github.com/narwhal-router/narwhal/config"
	"github.com/narwhal-router/narwhal/messages"
)

// testBalancer is a small load balancer in front of Narwhal nodes, as a cloud balancer or an
// ingress controller would be: it health-checks each node's /readyz every interval and sends
// each request, round robin, to a node that answered ready, over a new connection, reading the
// request body whole first (bufferingProxy). It retries nothing: a request sent to a node that
// refuses it fails.
type testBalancer struct {
	nodes    []*narwhalNode
	ready    []atomic.Bool
	rr       atomic.Uint64
	proxies  []http.Handler
	srv      *httptest.Server
	stop     chan struct{}
	done     sync.WaitGroup
	noReady  atomic.Int64
	interval time.Duration
}

func startBalancer(t *testing.T, nodes []*narwhalNode, interval time.Duration) *testBalancer {
	t.Helper()
	b := &testBalancer{nodes: nodes, ready: make([]atomic.Bool, len(nodes)), stop: make(chan struct{}), interval: interval}
	check := &http.Client{Timeout: interval}
	for i, n := range nodes {
		u, err := url.Parse(n.api)
		if err != nil {
			t.Fatal(err)
		}
		b.proxies = append(b.proxies, bufferingProxy(u, &http.Transport{DisableKeepAlives: true}))
		b.done.Add(1)
		go func() {
			defer b.done.Done()
			tick := time.NewTicker(interval)
			defer tick.Stop()
			for {
				resp, err := check.Get(n.admin + "/readyz")
				if err == nil {
					resp.Body.Close()
				}
				b.ready[i].Store(err == nil && resp.StatusCode == 200)
				select {
				case <-b.stop:
					return
				case <-tick.C:
				}
			}
		}()
	}
	b.srv = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		for range len(b.nodes) {
			i := int(b.rr.Add(1) % uint64(len(b.nodes)))
			if b.ready[i].Load() {
				b.proxies[i].ServeHTTP(w, r)
				return
			}
		}
		b.noReady.Add(1)
		http.Error(w, "no ready backend", http.StatusServiceUnavailable)
	}))
	t.Cleanup(func() {
		close(b.stop)
		b.done.Wait()
		b.srv.Close()
	})
	return b
}

// stopGracefully sends the node SIGTERM and waits for its process to exit (exitTime).
func (n *narwhalNode) stopGracefully(within time.Duration) {
	n.t.Helper()
	n.exitTime(within)
}

// A rolling restart of a 3-node cluster behind a balancer that follows /readyz loses no
// request: each node, on SIGTERM, turns unready at once and serves its drain delay, so the
// balancer has stopped sending before its listener closes; restarted, it takes traffic again
// once it is ready.
func TestRollingRestartBehindABalancerLosesNoRequest(t *testing.T) {
	c := startCluster(t, clusterSetup{nodes: 3, config: func(cfg *config.Config) {
		cfg.Server.DrainDelayS = 0.6 // several of the balancer's checks
		// The streams a node holds when its listener closes finish within the grace; the
		// cluster tests' 1 s, on a loaded machine, cut one now and then (a documented bound,
		// not what this test is about).
		cfg.Server.ShutdownGraceS = 5
	}})
	lb := startBalancer(t, c.nodes, 100*time.Millisecond)
	eventually(t, 3*time.Second, func() bool { return lb.ready[0].Load() && lb.ready[1].Load() && lb.ready[2].Load() },
		func() string { return "the balancer never saw every node ready" })
	load := startLoad(t, lb.srv.URL, 6, `{"model":"sim-model","prompt":"roll","stream":true}`)
	load.waitServed(t, 30)
	for _, n := range c.nodes {
		began := time.Now()
		n.stopGracefully(10 * time.Second)
		n.start()
		n.waitReady()
		eventually(t, 3*time.Second, func() bool {
			for i := range c.nodes {
				if c.nodes[i] == n {
					return lb.ready[i].Load()
				}
			}
			return false
		}, func() string { return n.name + " not back in the balancer" })
		load.waitServed(t, 20)
		t.Logf("%s restarted in %v", n.name, time.Since(began).Round(time.Millisecond))
	}
	c.waitMembers(3, 10*time.Second)
	ok, failures := load.stop()
	if len(failures) > 0 || lb.noReady.Load() > 0 {
		t.Fatalf("%d of %d requests failed across the rolling restart (%d found no ready node): %v",
			len(failures), ok+int64(len(failures)), lb.noReady.Load(), failures[:min(5, len(failures))])
	}
	t.Logf("rolling restart of 3 nodes behind a /readyz balancer: %d requests, 0 failed", ok)
}

// Engine identity is the name on every node: a verdict about an engine a node has not added
// yet applies the moment it adds it. Here node-0 adds d9 and an operator ejects it there; when
// node-1 adds d9 later, it starts ejected on node-0's word, without a join check of its own.
func TestVerdictAboutAnEngineNotYetAddedAppliesWhenItIs(t *testing.T) {
	c := startCluster(t, clusterSetup{nodes: 2})
	d9, err := sim.Start(sim.Options{Name: "d9", Role: sim.RoleDecode, Models: []string{"sim-model"}, Tokens: 2})
	if err != nil {
		t.Fatal(err)
	}
	defer d9.Close()
	add := func(n *narwhalNode) {
		t.Helper()
		resp, err := n.client.Post(n.admin+"/engines", "application/json", strings.NewReader(engineJSON(d9)))
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		if b, _ := io.ReadAll(resp.Body); resp.StatusCode != http.StatusCreated {
			t.Fatalf("%s POST /engines: %d %s", n.name, resp.StatusCode, b)
		}
	}
	a, b := c.nodes[0], c.nodes[1]
	add(a)
	a.watchState("d9", "admitted", 5*time.Second)
	a.adminPost("/engines/d9/eject?reason=firmware")
	eventually(t, 3*time.Second, func() bool {
		for _, v := range b.status().Verdicts {
			if v.Engine == "d9" && v.State == "ejected" {
				return true
			}
		}
		return false
	}, func() string { return fmt.Sprintf("node-1 never heard of d9's ejection: %+v", b.status().Verdicts) })

	add(b)
	e := b.engine("d9")
	if e.State != "ejected" || e.EjectedBy != "admin" || e.DecidedBy != a.name || e.JoinCheck != nil {
		t.Fatalf("d9 on node-1, added after node-0 ejected it: %+v", e)
	}
	before := d9.Stats().DecodeRequests
	noFailures(t, b, 5)
	if d9.Stats().DecodeRequests != before {
		t.Fatal("node-1 placed requests on the engine node-0's operator ejected")
	}
	// The operator's readmission on node-0 readmits it on node-1 too.
	a.adminPost("/engines/d9/readmit")
	b.watchState("d9", "admitted", 3*time.Second)
	var es []messages.EngineState
	b.getJSON("/engines", &es)
	raw, _ := json.Marshal(es)
	if !strings.Contains(string(raw), `"source":"admin"`) {
		t.Fatalf("node-1's /engines does not show d9's source: %s", raw)
	}
}

// An engine only one node has (added through its admin API) is probed by that node even when
// its name hashes to another node as its prober: the prober, which has never heard of it, says
// nothing, and after an interval of silence the node that has it probes it itself. Four such
// engines, failing at first, are each readmitted once they heal, whichever node their names
// hash to.
func TestAnEngineOnlyOneNodeHasIsProbedThere(t *testing.T) {
	c := startCluster(t, clusterSetup{nodes: 2, config: func(cfg *config.Config) {
		cfg.Recovery.ProbeIntervalS, cfg.Recovery.ProbeMaxIntervalS = 0.2, 0.4
	}})
	a := c.nodes[0]
	var local []*sim.Engine
	for i := range 4 {
		e, err := sim.Start(sim.Options{Name: fmt.Sprintf("x%d", i), Role: sim.RoleDecode, Models: []string{"sim-model"}, Tokens: 2})
		if err != nil {
			t.Fatal(err)
		}
		defer e.Close()
		if err := e.InjectFault("any.status=500", 1_000_000); err != nil {
			t.Fatal(err)
		}
		local = append(local, e)
		resp, err := a.client.Post(a.admin+"/engines", "application/json", strings.NewReader(engineJSON(e)))
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		if resp.StatusCode != http.StatusCreated {
			t.Fatalf("POST /engines %s: %d", e.Name(), resp.StatusCode)
		}
	}
	for _, e := range local {
		a.watchState(e.Name(), "ejected", 5*time.Second)
	}
	for _, e := range local {
		e.ClearFaults()
	}
	for _, e := range local {
		a.watchState(e.Name(), "admitted", 5*time.Second)
	}
}
