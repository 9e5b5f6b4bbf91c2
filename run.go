package main

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"net"
	"os"
	"os/signal"
	"syscall"
	"time"

	"github.com/narwhal-router/narwhal/buildinfo"
	"github.com/narwhal-router/narwhal/config"
	"github.com/narwhal-router/narwhal/node"
)

// run serves until SIGTERM or SIGINT, then shuts down gracefully: /readyz turns 503 at once,
// the listener keeps serving for server.drain_delay_s (a second SIGTERM or SIGINT ends that
// delay), then in-flight requests get server.shutdown_grace_s. SIGHUP reloads the
// configuration with reload (nil: nothing to reload), and so does a change of the file at
// watch (empty: none watched), which Kubernetes makes to a mounted ConfigMap without a signal;
// SIGUSR1 writes the supervisor tree to stderr.
//
// A reload runs off this loop (reloader), so that a slow one — a large fleet, a file that
// blocks — never holds back a stop signal: SIGTERM starts the drain at once, whatever a reload
// is doing.
func run(rt node.Runtime, log *slog.Logger, level *slog.LevelVar, reload func() (node.Runtime, error), watch string, started func(*node.Server)) error {
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
	var w *configWatch
	if reload != nil && watch != "" {
		w = newConfigWatch(watch)
		reload = w.wrap(reload)
	}
	reloads := reloader(srv, reload)
	defer close(reloads)
	if w != nil {
		ctx, cancel := context.WithCancel(context.Background())
		watched := make(chan struct{})
		tick := time.NewTicker(configPollInterval)
		go func() {
			defer close(watched)
			defer tick.Stop()
			w.run(ctx, tick.C, log, func() {
				select {
				case reloads <- struct{}{}:
				default: // one is already pending: it reads the file as it is by then
				}
			})
		}()
		defer func() { cancel(); <-watched }() // before reloads is closed
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
				select {
				case reloads <- struct{}{}:
					log.Info("reloading the configuration", "signal", sig.String())
				default: // one is already pending: it reads the file as it is by then
					log.Info("a reload is already pending; this SIGHUP joins it", "signal", sig.String())
				}
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

// reloader runs reloads one at a time, off the signal loop, until the channel it returns is
// closed. A send asks for a reload; the channel holds one request, so SIGHUPs that arrive while
// a reload runs coalesce into one more reload, which reads the file as it is once the running
// one ended. With no reload function, it runs none.
func reloader(srv *node.Server, reload func() (node.Runtime, error)) chan struct{} {
	reloads := make(chan struct{}, 1)
	go func() {
		for range reloads {
			if reload != nil {
				srv.Reload(reload) // logs what it applied or refused
			}
		}
	}()
	return reloads
}
