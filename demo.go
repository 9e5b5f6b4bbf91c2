package main

import (
	"context"
	"fmt"
	"io"
	"net"
	"os"
	"os/exec"
	"os/signal"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/spf13/cobra"
	"go.yaml.in/yaml/v3"

	"github.com/narwhal-router/narwhal/bench/sim"
	"github.com/narwhal-router/narwhal/config"
	"github.com/narwhal-router/narwhal/node"
	"github.com/narwhal-router/narwhal/transport/kv"
)

func demoCommand() *cobra.Command {
	var listen, adminListen string
	var nodes int
	cmd := &cobra.Command{
		Use:   "demo",
		Short: "Run the router in front of an embedded simulated fleet (2 prefill + 2 decode engines)",
		RunE: func(cmd *cobra.Command, _ []string) error {
			fleet, err := sim.StartFleet(sim.FleetOptions{Prefill: 2, Decode: 2, Engine: sim.Options{
				Models: []string{"sim-model"}, TTFT: 40 * time.Millisecond, PrefillPerToken: 200 * time.Microsecond,
				ITL: 30 * time.Millisecond, Tokens: 24,
			}})
			if err != nil {
				return fmt.Errorf("start simulated fleet: %w", err)
			}
			defer fleet.Close()
			cfg := config.Default()
			cfg.Server.Listen, cfg.Server.AdminListen = listen, adminListen
			cfg.Log.Format = "text"
			cfg.Server.ShutdownGraceS = 5
			cfg.Server.DrainDelayS = 0 // no load balancer in front of a demo
			for _, e := range fleet.Engines {
				cfg.Engines = append(cfg.Engines, config.Engine{
					Name: e.Name(), URL: e.URL(), Role: config.Role(e.Role()), Models: e.Models(),
					KV: config.KV{Connector: kv.NIXL, EngineID: e.EngineID(), Endpoint: e.KVEndpoint(),
						TransferModes: []string{"pull"}},
				})
			}
			rt, err := node.Provision(cfg, kv.Builtin())
			if err != nil {
				return err
			}
			if nodes > 1 {
				return demoNodes(cfg, nodes, fleet)
			}
			log, level := newLogger(cfg.Log, os.Stderr)
			return run(rt, log, level, nil, "", func(s *node.Server) {
				// The banner's curls should work when it appears: wait (bounded) for the
				// simulated engines' join checks, which take a few tens of milliseconds. Past
				// the bound the banner is printed all the same.
				ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
				_ = s.WaitJoined(ctx)
				cancel()
				printDemoBanner(os.Stdout, fleet, s.Addr(), s.AdminAddr())
			})
		},
	}
	cmd.Flags().StringVar(&listen, "listen", "127.0.0.1:8000", "client API address")
	cmd.Flags().StringVar(&adminListen, "admin-listen", "127.0.0.1:8001", "admin address (with --nodes, node i adds 10×i to both ports)")
	cmd.Flags().IntVar(&nodes, "nodes", 1, "run this many Narwhal nodes as one cluster (separate processes, cluster ports 7946 and up)")
	return cmd
}

// printDemoBanner tells a newcomer where everything of the demo listens: the router's API and
// admin listener, and each simulated engine, so an engine can be curled directly to compare
// with what the router returns.
func printDemoBanner(w io.Writer, fleet *sim.Fleet, addr, adminAddr string) {
	fmt.Fprintf(w, `Narwhal is routing to a simulated fleet: %d prefill + %d decode engines.

  API    http://%[3]s/v1   (model "sim-model")
  admin  http://%[4]s/debug/tree?format=text   /engines   /metrics

%[5]s
Try it:

  curl -N http://%[3]s/v1/chat/completions -H 'Content-Type: application/json' \
    -d '{"model":"sim-model","messages":[{"role":"user","content":"Explain disaggregated prefill."}],"stream":true}'

The access log (below, one JSON line per request) says how each was run: a short prompt like
this one is decoded alone ("disaggregation":"local"); one of about 256 words or more is
prefilled on a prefill engine and decoded on a decode engine ("disaggregated"). The README's
quick start has both.

Ctrl-C stops it.
`, len(fleet.ByRole(sim.RolePrefill)), len(fleet.ByRole(sim.RoleDecode)), addr, adminAddr, demoEngineLines(fleet))
}

// demoEngineLines lists the simulated engines, one a line, with a curl that talks to the first
// one directly (bypassing the router).
func demoEngineLines(fleet *sim.Fleet) string {
	var b strings.Builder
	b.WriteString("Simulated engines (vLLM's API plus /sim/stats, /sim/requests, /sim/faults):\n\n")
	for _, e := range fleet.Engines {
		fmt.Fprintf(&b, "  %-4s %-8s %s\n", e.Name(), e.Role(), e.URL())
	}
	if len(fleet.Engines) > 0 {
		fmt.Fprintf(&b, "\n  curl %s/v1/models   # one engine directly, without the router\n", fleet.Engines[0].URL())
	}
	return b.String()
}

// demoNodes runs n `narwhal serve` processes in front of the demo fleet, as one cluster with a
// static seed list, until Ctrl-C. Node i listens on the demo's ports plus 10×i.
func demoNodes(base config.Config, n int, fleet *sim.Fleet) error {
	if n > 9 {
		return fmt.Errorf("--nodes %d: at most 9 for the demo", n)
	}
	self, err := os.Executable()
	if err != nil {
		return err
	}
	dir, err := os.MkdirTemp("", "narwhal-demo-")
	if err != nil {
		return err
	}
	defer os.RemoveAll(dir)
	shift := func(addr string, by int) (string, error) {
		host, port, err := net.SplitHostPort(addr)
		if err != nil {
			return "", err
		}
		p, err := strconv.Atoi(port)
		if err != nil {
			return "", fmt.Errorf("%q: the demo needs numeric ports", addr)
		}
		return net.JoinHostPort(host, strconv.Itoa(p+by)), nil
	}
	var seeds []string
	for i := range n {
		seeds = append(seeds, fmt.Sprintf("127.0.0.1:%d", 7946+i))
	}
	var children []*exec.Cmd
	var done []chan struct{}
	exited := make(chan error, n)
	stop := func() {
		for _, c := range children {
			c.Process.Signal(syscall.SIGCONT) // a node stopped to try a stall still gets to leave
			c.Process.Signal(syscall.SIGTERM)
		}
		for i, d := range done {
			select {
			case <-d:
			case <-time.After(15 * time.Second):
				children[i].Process.Kill()
				<-d
			}
		}
	}
	defer stop()
	var lines []string
	for i := range n {
		cfg := base
		if cfg.Server.Listen, err = shift(base.Server.Listen, 10*i); err != nil {
			return err
		}
		if cfg.Server.AdminListen, err = shift(base.Server.AdminListen, 10*i); err != nil {
			return err
		}
		cfg.Cluster.Enabled, cfg.Cluster.NodeName, cfg.Cluster.Bind, cfg.Cluster.Seeds = true, fmt.Sprintf("node-%d", i), seeds[i], seeds
		if err := cfg.Validate(kv.Builtin()); err != nil {
			return err
		}
		b, err := yaml.Marshal(cfg)
		if err != nil {
			return err
		}
		path := filepath.Join(dir, fmt.Sprintf("node-%d.yaml", i))
		if err := os.WriteFile(path, b, 0o600); err != nil {
			return err
		}
		c := exec.Command(self, "serve", "--config", path)
		c.Stdout, c.Stderr = os.Stdout, os.Stderr
		if err := c.Start(); err != nil {
			return fmt.Errorf("start node %d: %w", i, err)
		}
		children = append(children, c)
		d := make(chan struct{})
		done = append(done, d)
		go func() {
			err := c.Wait()
			close(d)
			exited <- fmt.Errorf("node-%d exited: %v", i, err)
		}()
		lines = append(lines, fmt.Sprintf("  node-%d  pid %-7d API http://%s/v1   admin http://%s/cluster  /engines  /debug/tree?format=text",
			i, c.Process.Pid, cfg.Server.Listen, cfg.Server.AdminListen))
	}
	fmt.Printf(`%d Narwhal nodes share one simulated fleet (%d prefill + %d decode engines) as one cluster:

%s

%s
Eject an engine on one node and watch it leave placement on all of them:

  curl -X POST -H 'X-Narwhal-Admin: 1' 'http://%s/engines/d0/eject?reason=demo'
  curl -s http://%s/engines | grep -A3 '"d0"'

Stall a node with kill -STOP <pid> (kill -CONT to resume) and watch /cluster on the others.
Ctrl-C stops them all.
`, n, len(fleet.ByRole(sim.RolePrefill)), len(fleet.ByRole(sim.RoleDecode)), strings.Join(lines, "\n"),
		demoEngineLines(fleet), base.Server.AdminListen, mustShift(shift, base.Server.AdminListen, 10))
	signals := make(chan os.Signal, 2)
	signal.Notify(signals, syscall.SIGTERM, syscall.SIGINT)
	defer signal.Stop(signals)
	select {
	case <-signals:
		return nil
	case err := <-exited:
		return err
	}
}

func mustShift(shift func(string, int) (string, error), addr string, by int) string {
	s, err := shift(addr, by)
	if err != nil {
		return addr
	}
	return s
}
