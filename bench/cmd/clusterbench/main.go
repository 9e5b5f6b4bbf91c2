// Command clusterbench measures what running Narwhal nodes as a cluster costs and how fast a
// verdict travels (bench/README.md, "Several nodes"): three `narwhal serve` processes with the
// cluster on (production defaults) in front of one simulated fleet, and one node without it as
// the baseline. It reports each process's idle CPU (share of one core) and RSS, then the time
// from an admin eject (or readmit) on one node until the two others' /engines show it, over
// many trials.
//
//	make build && go run ./bench/cmd/clusterbench -narwhal bin/narwhal
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
	"github.com/narwhal-router/narwhal/config"
	"github.com/narwhal-router/narwhal/messages"
	"github.com/narwhal-router/narwhal/transport/kv"
)

func main() {
	bin := flag.String("narwhal", "bin/narwhal", "the narwhal binary (make build)")
	idle := flag.Duration("idle", 30*time.Second, "how long to measure idle cost")
	trials := flag.Int("trials", 200, "verdicts to time")
	flag.Parse()
	if err := run(*bin, *idle, *trials); err != nil {
		fmt.Fprintln(os.Stderr, "clusterbench:", err)
		os.Exit(1)
	}
}

type proc struct {
	name  string
	admin string
	cmd   *exec.Cmd
}

func run(bin string, idle time.Duration, trials int) error {
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

	var seeds []string
	for range 3 {
		seeds = append(seeds, freeAddr())
	}
	var procs []*proc
	defer func() {
		for _, p := range procs {
			p.cmd.Process.Signal(syscall.SIGTERM)
			p.cmd.Wait()
		}
	}()
	for i := range 4 {
		cfg := config.Default()
		for _, e := range fleet.Engines {
			cfg.Engines = append(cfg.Engines, config.Engine{Name: e.Name(), URL: e.URL(), Role: config.Role(e.Role()), Models: e.Models(),
				KV: config.KV{Connector: kv.NIXL, EngineID: e.EngineID(), Endpoint: e.KVEndpoint(), TransferModes: []string{"pull"}}})
		}
		cfg.Log.AccessLog, cfg.Log.Level = false, "error"
		cfg.Server.DrainDelayS = 0 // no load balancer to wait for: stop at once
		cfg.Server.Listen, cfg.Server.AdminListen = freeAddr(), freeAddr()
		name := "baseline (no cluster)"
		if i < 3 {
			name = fmt.Sprintf("node-%d", i)
			cfg.Cluster.Enabled, cfg.Cluster.NodeName, cfg.Cluster.Bind, cfg.Cluster.Seeds = true, name, seeds[i], seeds
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
	for _, p := range procs[:3] {
		if err := waitFor(20*time.Second, func() bool { var st cluster.Status; return get(p.admin+"/cluster", &st) == nil && len(st.Members) == 3 }); err != nil {
			return fmt.Errorf("%s: cluster of 3 not formed: %w", p.name, err)
		}
	}
	if err := waitFor(20*time.Second, func() bool { var st cluster.Status; return get(procs[3].admin+"/cluster", &st) == nil }); err != nil {
		return fmt.Errorf("baseline not up: %w", err)
	}

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
	fmt.Printf("Idle for %s (3-node cluster, production defaults: gossip 0.3 s, heartbeats 0.2 s, re-publish 1 s):\n\n", idle)
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

	// Convergence: eject then readmit d0 on one node after another; time until both others show it.
	var lat []time.Duration
	for i := range trials {
		src := procs[i%3]
		path, want := "/engines/d0/eject?reason=bench", "ejected"
		if i%2 == 1 {
			path, want = "/engines/d0/readmit?force=true", "admitted"
		}
		t0 := time.Now()
		resp, err := http.Post(src.admin+path, "", nil)
		if err != nil {
			return err
		}
		resp.Body.Close()
		for _, p := range procs[:3] {
			if p == src {
				continue
			}
			if err := waitFor(5*time.Second, func() bool { return state(p.admin, "d0") == want }); err != nil {
				return fmt.Errorf("trial %d: %s never showed d0 %s", i, p.name, want)
			}
			lat = append(lat, time.Since(t0))
		}
	}
	sort.Slice(lat, func(i, j int) bool { return lat[i] < lat[j] })
	q := func(f float64) time.Duration { return lat[min(len(lat)-1, int(f*float64(len(lat))))] }
	fmt.Printf("\nVerdict convergence, %d verdicts × 2 receiving nodes (admin call on one node → the other node's /engines shows it,\npolled every 0.5 ms; includes the admin HTTP round trip):\n\n", trials)
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
