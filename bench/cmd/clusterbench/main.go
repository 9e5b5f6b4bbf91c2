// Command clusterbench measures what running Narwhal nodes as a cluster costs and how fast a
// verdict travels (bench/README.md, "Several nodes"): three `narwhal serve` processes with the
// cluster on (production defaults) in front of one simulated fleet, and one node without it as
// the baseline. It reports each process's idle CPU (share of one core) and RSS, then the time
// from an admin eject (or readmit) on one node until the two others' /engines show it, over
// many trials. -provider etcd runs the membership on a real etcd (the etcd binary on PATH,
// started on free loopback ports, or -etcd ENDPOINT), and -nodes sets the cluster's size.
//
//	make build && go run ./bench/cmd/clusterbench -narwhal bin/narwhal
//	go run ./bench/cmd/clusterbench -narwhal bin/narwhal -provider etcd -nodes 2 -idle 0
package main

import (
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"syscall"
	"time"

	"go.yaml.in/yaml/v3"

	"github.com/narwhal-router/narwhal/bench/harness"
	"github.com/narwhal-router/narwhal/bench/sim"
	"github.com/narwhal-router/narwhal/cluster"
	"github.com/narwhal-router/narwhal/cluster/certs"
	"github.com/narwhal-router/narwhal/config"
	"github.com/narwhal-router/narwhal/messages"
	"github.com/narwhal-router/narwhal/transport/kv"
)

func main() {
	bin := flag.String("narwhal", "bin/narwhal", "the narwhal binary (make build)")
	idle := flag.Duration("idle", 30*time.Second, "how long to measure idle cost")
	trials := flag.Int("trials", 200, "verdicts to time")
	var o options
	flag.IntVar(&o.nodes, "nodes", 3, "cluster nodes (at least 2)")
	flag.StringVar(&o.provider, "provider", config.ProviderStatic, "membership: static (seed list) or etcd")
	flag.StringVar(&o.etcd, "etcd", "", "with -provider etcd: the etcd endpoint; empty starts an etcd of its own")
	flag.BoolVar(&o.tls, "tls", false, "cluster.tls on (certificates of a CA of the bench's own)")
	flag.BoolVar(&o.cold, "cold", false, "also time how long after the last node joined every node lists all members (a verdict reaches only the members a node knows)")
	flag.Parse()
	if err := run(*bin, *idle, *trials, o); err != nil {
		fmt.Fprintln(os.Stderr, "clusterbench:", err)
		os.Exit(1)
	}
}

type proc struct {
	name  string
	admin string
	cmd   *exec.Cmd
}

// options shape the cluster under test.
type options struct {
	nodes          int
	provider, etcd string
	cold, tls      bool
}

func run(bin string, idle time.Duration, trials int, o options) error {
	if o.nodes < 2 {
		return fmt.Errorf("-nodes %d: a cluster needs 2 nodes or more", o.nodes)
	}
	fleet, err := sim.StartFleet(sim.FleetOptions{Prefill: 2, Decode: 2, Engine: sim.Options{Models: []string{"sim-model"}, Tokens: 2}})
	if err != nil {
		return err
	}
	defer fleet.Close()
	dir, err := os.MkdirTemp("", "clusterbench-")
	if err != nil {
		return err
	}
	defer os.RemoveAll(dir)
	if o.provider == config.ProviderEtcd && o.etcd == "" {
		stop, endpoint, err := startEtcd(dir)
		if err != nil {
			return err
		}
		defer stop()
		o.etcd = endpoint
	}

	var creds map[string]certs.Files
	if o.tls {
		var names []string
		for i := range o.nodes {
			names = append(names, fmt.Sprintf("node-%d", i))
		}
		if creds, err = certs.Write(filepath.Join(dir, "certs"), names, nil); err != nil {
			return err
		}
	}
	var seeds []string
	for range o.nodes {
		seeds = append(seeds, freeAddr())
	}
	var procs []*proc
	defer func() {
		for _, p := range procs {
			p.cmd.Process.Signal(syscall.SIGTERM)
			p.cmd.Wait()
		}
	}()
	for i := range o.nodes + 1 {
		cfg := config.Default()
		for _, e := range fleet.Engines {
			cfg.Engines = append(cfg.Engines, config.Engine{Name: e.Name(), URL: e.URL(), Role: config.Role(e.Role()), Models: e.Models(),
				KV: config.KV{Connector: kv.NIXL, EngineID: e.EngineID(), Endpoint: e.KVEndpoint(), TransferModes: []string{"pull"}}})
		}
		cfg.Log.AccessLog, cfg.Log.Level = false, "error"
		cfg.Server.DrainDelayS = 0 // no load balancer to wait for: stop at once
		cfg.Server.Listen, cfg.Server.AdminListen = freeAddr(), freeAddr()
		name := "baseline (no cluster)"
		if i < o.nodes {
			name = fmt.Sprintf("node-%d", i)
			cfg.Cluster.Enabled, cfg.Cluster.NodeName, cfg.Cluster.Bind, cfg.Cluster.Seeds = true, name, seeds[i], seeds
			if f, ok := creds[name]; ok {
				cfg.Cluster.TLS = config.ClusterTLS{CertFile: f.Cert, KeyFile: f.Key, CAFile: f.CA}
			}
			if o.provider == config.ProviderEtcd {
				cfg.Cluster.Provider, cfg.Cluster.Seeds = config.ProviderEtcd, nil
				cfg.Cluster.Etcd.Endpoints, cfg.Cluster.Etcd.Prefix = []string{o.etcd}, fmt.Sprintf("/clusterbench-%d", os.Getpid())
			}
		}
		b, err := yaml.Marshal(cfg)
		if err != nil {
			return err
		}
		path := filepath.Join(dir, fmt.Sprintf("%d.yaml", i))
		if err := os.WriteFile(path, b, 0o600); err != nil {
			return err
		}
		cmd := exec.Command(bin, "serve", "--config", path, "--skip-preflight")
		cmd.Stdout, cmd.Stderr = io.Discard, os.Stderr
		if err := cmd.Start(); err != nil {
			return err
		}
		procs = append(procs, &proc{name: name, admin: "http://" + cfg.Server.AdminListen, cmd: cmd})
	}
	members, baseline := procs[:o.nodes], procs[o.nodes]
	for _, p := range members {
		if err := waitFor(20*time.Second, func() bool {
			var st cluster.Status
			return get(p.admin+"/cluster", &st) == nil && (len(st.Members) == o.nodes || o.cold && st.Joined)
		}); err != nil {
			return fmt.Errorf("%s: cluster of %d not formed: %w", p.name, o.nodes, err)
		}
	}
	if err := waitFor(20*time.Second, func() bool { var st cluster.Status; return get(baseline.admin+"/cluster", &st) == nil }); err != nil {
		return fmt.Errorf("baseline not up: %w", err)
	}
	if o.cold {
		joined := time.Now()
		for _, p := range members {
			if err := waitFor(20*time.Second, func() bool {
				var st cluster.Status
				return get(p.admin+"/cluster", &st) == nil && len(st.Members) == o.nodes
			}); err != nil {
				return fmt.Errorf("%s: cluster of %d not formed: %w", p.name, o.nodes, err)
			}
		}
		fmt.Printf("Every node lists all %d members %s after the last one joined (-cold)\n", o.nodes, ms(time.Since(joined)))
	}
	if idle > 0 && !o.cold {
		if err := idleCost(procs, idle, o); err != nil {
			return err
		}
	}
	return convergence(members, trials, o)
}

// idleCost samples each process's CPU and RSS while nothing happens.
func idleCost(procs []*proc, idle time.Duration, o options) error {
	var err error

	time.Sleep(3 * time.Second) // let start-up settle before measuring idle
	before := make([]harness.Usage, len(procs))
	for i, p := range procs {
		if before[i], err = harness.ReadUsage(p.cmd.Process.Pid); err != nil {
			return err
		}
	}
	start := time.Now()
	time.Sleep(idle)
	wall := time.Since(start)
	fmt.Printf("Idle for %s (%d-node cluster, %s membership, production defaults: gossip 0.3 s, heartbeats 0.2 s, re-publish 1 s):\n\n",
		idle, o.nodes, o.provider)
	fmt.Println("| process | CPU (% of one core) | RSS (MiB) | threads |")
	fmt.Println("|---|---|---|---|")
	for i, p := range procs {
		after, err := harness.ReadUsage(p.cmd.Process.Pid)
		if err != nil {
			return err
		}
		cpu := float64(after.CPU-before[i].CPU) / float64(wall) * 100
		fmt.Printf("| %s | %.2f | %.1f | %d |\n", p.name, cpu, float64(after.RSSKiB)/1024, after.Threads)
	}
	return nil
}

// convergence times verdicts from the node that decides to every other node.
func convergence(procs []*proc, trials int, o options) error {
	// Convergence: eject then readmit d0 on one node after another; time until both others show it.
	var lat []time.Duration
	for i := range trials {
		src := procs[i%len(procs)]
		path, want := "/engines/d0/eject?reason=bench", "ejected"
		if i%2 == 1 {
			path, want = "/engines/d0/readmit?force=true", "admitted"
		}
		t0 := time.Now()
		resp, err := http.Post(src.admin+path, "application/json", nil)
		if err != nil {
			return err
		}
		body, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if resp.StatusCode != http.StatusOK {
			return fmt.Errorf("trial %d: %s %s: %s %s", i, src.name, path, resp.Status, body)
		}
		for _, p := range procs {
			if p == src {
				continue
			}
			if err := waitFor(5*time.Second, func() bool { return state(p.admin, "d0") == want }); err != nil {
				return fmt.Errorf("trial %d: %s never showed d0 %s (it shows %q; %s shows %q)", i, p.name, want, state(p.admin, "d0"), src.name, state(src.admin, "d0"))
			}
			lat = append(lat, time.Since(t0))
		}
	}
	sort.Slice(lat, func(i, j int) bool { return lat[i] < lat[j] })
	q := func(f float64) time.Duration { return lat[min(len(lat)-1, int(f*float64(len(lat))))] }
	fmt.Printf("\nVerdict convergence, %s membership, %d verdicts × %d receiving nodes (admin call on one node → the other node's /engines shows it,\npolled every 0.5 ms; includes the admin HTTP round trip):\n\n",
		o.provider, trials, len(procs)-1)
	fmt.Printf("| p50 | p90 | p99 | max |\n|---|---|---|---|\n| %s | %s | %s | %s |\n",
		ms(q(0.5)), ms(q(0.9)), ms(q(0.99)), ms(lat[len(lat)-1]))
	return nil
}

func ms(d time.Duration) string { return fmt.Sprintf("%.2f ms", float64(d)/float64(time.Millisecond)) }

func state(admin, engine string) string {
	var es []messages.EngineState
	if get(admin+"/engines", &es) != nil {
		return ""
	}
	for _, e := range es {
		if e.Name == engine {
			return e.State
		}
	}
	return ""
}

func get(url string, v any) error {
	resp, err := http.Get(url)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	if resp.StatusCode != 200 {
		return fmt.Errorf("%s: %s", url, resp.Status)
	}
	return json.NewDecoder(resp.Body).Decode(v)
}

func waitFor(within time.Duration, cond func() bool) error {
	deadline := time.Now().Add(within)
	for !cond() {
		if time.Now().After(deadline) {
			return fmt.Errorf("not within %s", within)
		}
		time.Sleep(500 * time.Microsecond)
	}
	return nil
}

var handedOut = map[string]bool{}

// freeAddr is a loopback port free for TCP and UDP, never one it returned before.
func freeAddr() string {
	for {
		ln, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			panic(err)
		}
		addr := ln.Addr().String()
		ln.Close()
		if handedOut[addr] {
			continue
		}
		if u, err := net.ListenPacket("udp", addr); err == nil {
			u.Close()
			handedOut[addr] = true
			return addr
		}
	}
}

// startEtcd runs the etcd binary on free loopback ports with a data directory under dir, and
// returns how to stop it and its client endpoint once it answers.
func startEtcd(dir string) (stop func(), endpoint string, err error) {
	bin, err := exec.LookPath("etcd")
	if err != nil {
		return nil, "", fmt.Errorf("-provider etcd needs the etcd binary (apt-get install etcd-server) or -etcd: %w", err)
	}
	client, peer := "http://"+freeAddr(), "http://"+freeAddr()
	cmd := exec.Command(bin, "--name", "default", "--data-dir", filepath.Join(dir, "etcd"),
		"--listen-client-urls", client, "--advertise-client-urls", client,
		"--listen-peer-urls", peer, "--initial-advertise-peer-urls", peer,
		"--initial-cluster", "default="+peer, "--log-level", "error")
	cmd.Stderr = os.Stderr
	if err := cmd.Start(); err != nil {
		return nil, "", fmt.Errorf("start etcd: %w", err)
	}
	stop = func() { cmd.Process.Kill(); cmd.Wait() }
	if err := waitFor(15*time.Second, func() bool {
		resp, err := http.Get(client + "/health")
		if err != nil {
			return false
		}
		resp.Body.Close()
		return resp.StatusCode == http.StatusOK
	}); err != nil {
		stop()
		return nil, "", fmt.Errorf("etcd does not answer: %w", err)
	}
	return stop, client, nil
}
