// Command narwhal is a disaggregated prefill/decode router for vLLM-compatible engines.
//
//	narwhal serve --config narwhal.yaml      run the router (SIGHUP, or a change of the file, reloads it)
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
	"net/http"
	"os"
	"strings"
	"time"

	"github.com/spf13/cobra"

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
			return run(rt, log, level, func() (node.Runtime, error) { return load(path) }, path, nil)
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
