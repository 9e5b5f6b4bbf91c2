// Command narwhal is a disaggregated prefill/decode router for vLLM-compatible engines.
//
//	narwhal serve --config narwhal.yaml      run the router (after a preflight)
//	narwhal preflight --config narwhal.yaml  check every engine and KV transfer, print a matrix
//	narwhal dump [--admin ADDR]              print the live supervisor tree
//	narwhal demo                             run it in front of a simulated fleet (no GPU)
//	narwhal sim ...                          run the engine simulator
package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"os"
	"os/signal"
	"strings"
	"syscall"
	"time"

	"github.com/spf13/cobra"

	"github.com/narwhal-router/narwhal/bench/sim"
	"github.com/narwhal-router/narwhal/config"
	"github.com/narwhal-router/narwhal/node"
	"github.com/narwhal-router/narwhal/transport/admin"
	"github.com/narwhal-router/narwhal/transport/preflight"
)

func main() {
	root := &cobra.Command{
		Use:           "narwhal",
		Short:         "Disaggregated prefill/decode router for vLLM-compatible engines",
		SilenceUsage:  true,
		SilenceErrors: true,
	}
	root.AddCommand(serveCommand(), preflightCommand(), dumpCommand(), demoCommand(), sim.Command())
	if err := root.Execute(); err != nil {
		fmt.Fprintln(os.Stderr, "narwhal:", err)
		os.Exit(1)
	}
}

func serveCommand() *cobra.Command {
	var path string
	var skipPreflight bool
	cmd := &cobra.Command{
		Use:   "serve",
		Short: "Run the router with a configuration file",
		RunE: func(cmd *cobra.Command, _ []string) error {
			cfg, err := config.Load(path)
			if err != nil {
				return err
			}
			log := newLogger(cfg.Log, os.Stderr)
			if !skipPreflight {
				if err := runPreflight(cfg, os.Stderr); err != nil {
					return fmt.Errorf("%w (start anyway with --skip-preflight)", err)
				}
				log.Info("preflight passed")
			}
			return run(cfg, log, nil)
		},
	}
	cmd.Flags().StringVarP(&path, "config", "c", "narwhal.yaml", "configuration file (YAML)")
	cmd.Flags().BoolVar(&skipPreflight, "skip-preflight", false, "start without checking engines and KV transfers first")
	return cmd
}

func preflightCommand() *cobra.Command {
	var path string
	cmd := &cobra.Command{
		Use:   "preflight",
		Short: "Check every engine's contract and every producer→consumer KV transfer; exit 1 on any failure",
		RunE: func(cmd *cobra.Command, _ []string) error {
			cfg, err := config.Load(path)
			if err != nil {
				return err
			}
			return runPreflight(cfg, os.Stdout)
		},
	}
	cmd.Flags().StringVarP(&path, "config", "c", "narwhal.yaml", "configuration file (YAML)")
	return cmd
}

// runPreflight prints the matrix and fails unless every check passed.
func runPreflight(cfg config.Config, w io.Writer) error {
	res, err := preflight.Run(context.Background(), cfg)
	if err != nil {
		return err
	}
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
				return fmt.Errorf("dump: %s: %s", resp.Status, strings.TrimSpace(string(b)))
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

func demoCommand() *cobra.Command {
	var listen, adminListen string
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
			for _, e := range fleet.Engines {
				cfg.Engines = append(cfg.Engines, config.Engine{
					Name: e.Name(), URL: e.URL(), Role: config.Role(e.Role()), Models: e.Models(),
					KV: config.KV{Connector: config.ConnectorNIXL, EngineID: e.EngineID(), Endpoint: e.KVEndpoint(),
						TransferModes: []string{"pull"}},
				})
			}
			if err := cfg.Validate(); err != nil {
				return err
			}
			return run(cfg, newLogger(cfg.Log, os.Stderr), func(s *node.Server) {
				fmt.Printf(`Narwhal is routing to a simulated fleet: %d prefill + %d decode engines.

  API    http://%[3]s/v1   (model "sim-model")
  admin  http://%[4]s/debug/tree?format=text   /engines   /metrics

Try it:

  curl -N http://%[3]s/v1/chat/completions -H 'Content-Type: application/json' \
    -d '{"model":"sim-model","messages":[{"role":"user","content":"Explain disaggregated prefill."}],"stream":true}'

Ctrl-C stops it.
`, len(fleet.ByRole(sim.RolePrefill)), len(fleet.ByRole(sim.RoleDecode)), s.Addr(), s.AdminAddr())
			})
		},
	}
	cmd.Flags().StringVar(&listen, "listen", "127.0.0.1:8000", "client API address")
	cmd.Flags().StringVar(&adminListen, "admin-listen", "127.0.0.1:8001", "admin address")
	return cmd
}

// run serves until SIGTERM or SIGINT, then shuts down gracefully. SIGUSR1 writes the supervisor
// tree to stderr.
func run(cfg config.Config, log *slog.Logger, started func(*node.Server)) error {
	srv, err := node.Start(cfg, node.Options{Logger: log, AccessLog: os.Stdout})
	if err != nil {
		return err
	}
	log.Info("narwhal listening", "addr", srv.Addr(), "admin", srv.AdminAddr(), "engines", len(cfg.Engines))
	if started != nil {
		started(srv)
	}
	signals := make(chan os.Signal, 4)
	signal.Notify(signals, syscall.SIGTERM, syscall.SIGINT, syscall.SIGUSR1)
	defer signal.Stop(signals)
	for {
		select {
		case err := <-srv.Failed():
			srv.Shutdown(context.Background())
			return err
		case sig := <-signals:
			if sig == syscall.SIGUSR1 {
				dumpTree(srv, os.Stderr)
				continue
			}
			log.Info("shutting down", "signal", sig.String(), "grace", cfg.Server.ShutdownGraceS.Duration().String())
			return srv.Shutdown(context.Background())
		}
	}
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

func newLogger(c config.Log, w io.Writer) *slog.Logger {
	var level slog.Level
	_ = level.UnmarshalText([]byte(c.Level))
	opts := &slog.HandlerOptions{Level: level}
	if c.Format == "text" {
		return slog.New(slog.NewTextHandler(w, opts))
	}
	return slog.New(slog.NewJSONHandler(w, opts))
}
