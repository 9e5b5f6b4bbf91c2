// Command narwhal is a disaggregated prefill/decode router for vLLM-compatible engines.
//
//	narwhal serve --config narwhal.yaml      run the router (SIGHUP reloads the file)
//	narwhal serve --check --config FILE      validate the configuration and exit
//	narwhal preflight --config narwhal.yaml  check every engine and KV transfer, print a matrix
//	narwhal dump [--admin ADDR]              print the live supervisor tree
//	narwhal demo                             run it in front of a simulated fleet (no GPU)
//	narwhal sim ...                          run the engine simulator
//	narwhal version (or --version)           version, VCS revision, modified flag, build time
package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
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
	"github.com/narwhal-router/narwhal/buildinfo"
	"github.com/narwhal-router/narwhal/cluster/certs"
	"github.com/narwhal-router/narwhal/config"
	"github.com/narwhal-router/narwhal/node"
	"github.com/narwhal-router/narwhal/transport/admin"
	"github.com/narwhal-router/narwhal/transport/kv"
	"github.com/narwhal-router/narwhal/transport/preflight"
)

func main() {
	if err := rootCommand().Execute(); err != nil {
		fmt.Fprintln(os.Stderr, "narwhal:", err)
		os.Exit(1)
	}
}

func rootCommand() *cobra.Command {
	root := &cobra.Command{
		Use:           "narwhal",
		Short:         "Disaggregated prefill/decode router for vLLM-compatible engines",
		Version:       version(),
		SilenceUsage:  true,
		SilenceErrors: true,
	}
	root.SetVersionTemplate("{{.Version}}\n")
	root.AddCommand(serveCommand(), preflightCommand(), dumpCommand(), demoCommand(), versionCommand(), sim.Command(), clusterCommand())
	noStrayArguments(root)
	return root
}

// noStrayArguments makes a positional argument an error for every command that takes none
// (all of them): `narwhal serve extra` must not start as if nothing were wrong.
func noStrayArguments(cmd *cobra.Command) {
	if cmd.Args == nil && !cmd.HasSubCommands() { // cobra refuses unknown subcommands itself
		cmd.Args = noArgs
	}
	for _, c := range cmd.Commands() {
		noStrayArguments(c)
	}
}

func noArgs(cmd *cobra.Command, args []string) error {
	if len(args) == 0 {
		return nil
	}
	return fmt.Errorf("%s takes no arguments, got %q (options are --flags; see %s --help)", cmd.CommandPath(), args, cmd.CommandPath())
}

func versionCommand() *cobra.Command {
	return &cobra.Command{
		Use:   "version",
		Short: "Print the version, VCS revision, modified flag, build time and Go version of this build",
		RunE: func(cmd *cobra.Command, _ []string) error {
			fmt.Fprintln(cmd.OutOrStdout(), version())
			return nil
		},
	}
}

// version is the build's identity as one line (package buildinfo): the stamped or module
// version, the VCS revision and whether the tree was modified, the build time and the Go
// version; what is not known says "unknown".
func version() string { return buildinfo.Get().String() }

func serveCommand() *cobra.Command {
	var path string
	var skipPreflight, check, skipBindCheck bool
	cmd := &cobra.Command{
		Use:   "serve",
		Short: "Run the router with a configuration file",
		RunE: func(cmd *cobra.Command, _ []string) error {
			rt, err := load(path)
			if err != nil {
				return err
			}
			if check {
				if !skipBindCheck {
					if err := bindListeners(rt.Config.Listeners()); err != nil {
						return fmt.Errorf("%s: %w", path, err)
					}
				}
				fmt.Fprintf(cmd.OutOrStdout(), "%s: configuration valid (%d engines)\n", path, len(rt.Engines))
				return nil
			}
			log, level := newLogger(rt.Config.Log, os.Stderr)
			// preflight.require: all is the strict start: the whole matrix, before listening.
			// By default every engine joins on its own check instead, and serve listens at once.
			if rt.Config.Preflight.Require == config.RequireAll && !skipPreflight {
				// The matrix ends with its verdict ("preflight passed"): nothing more to say.
				if err := runPreflight(rt, os.Stderr); err != nil {
					return fmt.Errorf("%w (preflight.require: all; start anyway with --skip-preflight, or set preflight.require: none "+
						"to start with the engines that pass their own checks)", err)
				}
			}
			return run(rt, log, level, func() (node.Runtime, error) { return load(path) }, nil)
		},
	}
	cmd.Flags().StringVarP(&path, "config", "c", "narwhal.yaml", "configuration file (YAML)")
	cmd.Flags().BoolVar(&skipPreflight, "skip-preflight", false, "with preflight.require: all, start without running the preflight matrix first")
	cmd.Flags().BoolVar(&check, "check", false, "validate the configuration (strict parsing, every value, every listener address bound once) and exit: 0 valid, 1 not")
	cmd.Flags().BoolVar(&skipBindCheck, "skip-bind-check", false, "with --check: do not bind the listener addresses (to check a new file while the router holds them)")
	return cmd
}

func preflightCommand() *cobra.Command {
	var path string
	cmd := &cobra.Command{
		Use:   "preflight",
		Short: "Check every engine's contract and every producer→consumer KV transfer; exit 1 on any failure",
		RunE: func(cmd *cobra.Command, _ []string) error {
			rt, err := load(path)
			if err != nil {
				return err
			}
			return runPreflight(rt, os.Stdout)
		},
	}
	cmd.Flags().StringVarP(&path, "config", "c", "narwhal.yaml", "configuration file (YAML)")
	return cmd
}

// load reads the configuration file at path and provisions it with Narwhal's own connectors:
// what `serve --check` accepts is what `serve` runs.
func load(path string) (node.Runtime, error) {
	cfg, err := config.Load(path)
	if err != nil {
		return node.Runtime{}, err
	}
	rt, err := node.Provision(cfg, kv.Builtin())
	if err != nil {
		return node.Runtime{}, fmt.Errorf("%s: %w", path, err)
	}
	return rt, nil
}

// runPreflight prints the matrix and fails unless every check passed.
func runPreflight(rt node.Runtime, w io.Writer) error {
	res := preflight.Run(context.Background(), rt.Engines, rt.Config)
	fmt.Fprint(w, res.Matrix())
	if !res.OK() {
		return errors.New("preflight failed")
	}
	return nil
}

func dumpCommand() *cobra.Command {
	var addr, format, token string
	cmd := &cobra.Command{
		Use:   "dump",
		Short: "Print the live supervisor tree of a running Narwhal (from its admin listener)",
		RunE: func(cmd *cobra.Command, _ []string) error {
			if format != "text" && format != "json" {
				return fmt.Errorf("--format %q: want text or json", format)
			}
			req, err := http.NewRequest(http.MethodGet, "http://"+addr+"/debug/tree?format="+format, nil)
			if err != nil {
				return err
			}
			if token != "" {
				req.Header.Set("Authorization", admin.BearerHeader(token))
			}
			resp, err := (&http.Client{Timeout: 15 * time.Second}).Do(req)
			if err != nil {
				return fmt.Errorf("dump: %w", err)
			}
			defer resp.Body.Close()
			if resp.StatusCode != http.StatusOK {
				b, _ := io.ReadAll(io.LimitReader(resp.Body, 4096))
				err := fmt.Errorf("dump: %s: %s", resp.Status, strings.TrimSpace(string(b)))
				if resp.StatusCode == http.StatusUnauthorized {
					if token == "" {
						return fmt.Errorf("%w; this admin listener needs its server.admin_token: pass it with --token or $NARWHAL_ADMIN_TOKEN", err)
					}
					return fmt.Errorf("%w; the token given (--token or $NARWHAL_ADMIN_TOKEN) is not this admin listener's server.admin_token", err)
				}
				return err
			}
			_, err = io.Copy(os.Stdout, resp.Body)
			return err
		},
	}
	cmd.Flags().StringVar(&addr, "admin", "127.0.0.1:8001", "admin listener address")
	cmd.Flags().StringVar(&format, "format", "text", "text or json")
	cmd.Flags().StringVar(&token, "token", os.Getenv("NARWHAL_ADMIN_TOKEN"), "admin bearer token (default $NARWHAL_ADMIN_TOKEN)")
	return cmd
}

// clusterCommand groups the cluster's tools: `narwhal cluster certs`.
func clusterCommand() *cobra.Command {
	cmd := &cobra.Command{Use: "cluster", Short: "Cluster tools"}
	var out string
	var nodes, hosts []string
	certsCmd := &cobra.Command{
		Use:   "certs",
		Short: "Make a CA and node certificates for cluster.tls (a test cluster, or one without a CA of its own)",
		RunE: func(cmd *cobra.Command, _ []string) error {
			files, err := certs.Write(out, nodes, hosts)
			if err != nil {
				return err
			}
			for _, name := range nodes {
				f := files[name]
				fmt.Fprintf(cmd.OutOrStdout(), "%s:\n  tls: {cert_file: %s, key_file: %s, ca_file: %s}\n", name, f.Cert, f.Key, f.CA)
			}
			return nil
		},
	}
	certsCmd.Flags().StringVar(&out, "out", "", "directory to write ca.pem, ca-key.pem and <node>.pem, <node>-key.pem into")
	certsCmd.Flags().StringSliceVar(&nodes, "nodes", []string{"node-0", "node-1", "node-2"}, "node names, one certificate each")
	certsCmd.Flags().StringSliceVar(&hosts, "host", nil, "host names or addresses to put in the certificates (localhost and 127.0.0.1 always are)")
	_ = certsCmd.MarkFlagRequired("out")
	cmd.AddCommand(certsCmd)
	return cmd
}

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
			return run(rt, log, level, nil, func(s *node.Server) {
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

// run serves until SIGTERM or SIGINT, then shuts down gracefully: /readyz turns 503 at once,
// the listener keeps serving for server.drain_delay_s (a second SIGTERM or SIGINT ends that
// delay), then in-flight requests get server.shutdown_grace_s. SIGHUP reloads the
// configuration with reload (nil: nothing to reload); SIGUSR1 writes the supervisor tree to
// stderr.
func run(rt node.Runtime, log *slog.Logger, level *slog.LevelVar, reload func() (node.Runtime, error), started func(*node.Server)) error {
	// Signals are caught before the listeners open: a SIGTERM that arrives as soon as Narwhal
	// says it is listening is a graceful stop, not the default abrupt exit.
	signals := make(chan os.Signal, 4)
	signal.Notify(signals, syscall.SIGTERM, syscall.SIGINT, syscall.SIGUSR1, syscall.SIGHUP)
	defer signal.Stop(signals)
	srv, err := node.Start(rt, node.Options{Logger: log, AccessLog: os.Stdout, SizeProcs: true, SetMemoryLimit: true, LogLevel: level})
	if err != nil {
		return err
	}
	build := buildinfo.Get()
	log.Info("narwhal listening", "addr", srv.Addr(), "admin", srv.AdminAddr(), "engines", len(rt.Engines),
		"version", build.Version, "revision", build.Revision, "modified", build.Modified, "built", build.BuildTime)
	if addr := srv.AdminAddr(); addr != "" && rt.Config.Server.AdminToken == "" && !loopback(addr) {
		log.Warn("the admin listener is reachable beyond this host and has no token: anyone who can reach it can eject engines and read profiles; set server.admin_token or listen on 127.0.0.1",
			"admin", addr)
	}
	if len(rt.APIKeys) == 0 && !loopback(srv.Addr()) {
		log.Warn("the client listener is reachable beyond this host and no client API key is configured: anyone who can reach it can use the fleet; set server.api_keys or listen on 127.0.0.1",
			"addr", srv.Addr())
	}
	if started != nil {
		started(srv)
	}
	var stopped chan error // set once a shutdown began
	for {
		select {
		case err := <-srv.Failed():
			srv.Shutdown(context.Background())
			return err
		case err := <-stopped:
			return err
		case sig := <-signals:
			switch {
			case sig == syscall.SIGUSR1:
				dumpTree(srv, os.Stderr)
			case sig == syscall.SIGHUP && reload == nil:
				log.Warn("SIGHUP: no configuration file to reload")
			case sig == syscall.SIGHUP:
				log.Info("reloading the configuration", "signal", sig.String())
				srv.Reload(reload) // logs what it applied or refused
			case stopped != nil:
				log.Info("second stop signal: ending the drain delay", "signal", sig.String())
				srv.EndDrain()
			default:
				cur := srv.Runtime().Config.Server
				log.Info("shutting down", "signal", sig.String(), "drain_delay", cur.DrainDelayS.Duration().String(), "grace", cur.ShutdownGraceS.Duration().String())
				stopped = make(chan error, 1)
				go func() { stopped <- srv.Shutdown(context.Background()) }()
			}
		}
	}
}

// loopback reports whether the listener address addr accepts only local connections.
func loopback(addr string) bool {
	host, _, err := net.SplitHostPort(addr)
	if err != nil {
		return false
	}
	ip := net.ParseIP(host)
	return ip != nil && ip.IsLoopback()
}

func dumpTree(srv *node.Server, w io.Writer) {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	tree, err := srv.Router().Tree(ctx)
	if err != nil {
		fmt.Fprintln(w, "tree dump failed:", err)
		return
	}
	fmt.Fprint(w, tree.Text())
}

// newLogger is the process log at log.level, which a reload changes through the returned level.
func newLogger(c config.Log, w io.Writer) (*slog.Logger, *slog.LevelVar) {
	level := new(slog.LevelVar)
	level.Set(c.SlogLevel())
	opts := &slog.HandlerOptions{Level: level}
	if c.Format == "text" {
		return slog.New(slog.NewTextHandler(w, opts)), level
	}
	return slog.New(slog.NewJSONHandler(w, opts)), level
}
