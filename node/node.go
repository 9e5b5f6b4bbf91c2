// Package node assembles a running Narwhal from a provisioned configuration (Runtime):
// the metrics reporters, the tracer, the cluster membership, the actor router, the engine
// sources and their catalog (the configuration file's list, the admin API, the discovery
// sources), the client listener and the admin listener; it reloads the configuration's run-time
// settings, and shuts down with a drain load balancers see. The `narwhal serve` and `narwhal
// demo` commands and the end-to-end tests all start Narwhal here.
package node

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"os"
	"runtime"
	"runtime/debug"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"go.opentelemetry.io/otel"

	"github.com/narwhal-router/narwhal/actors"
	"github.com/narwhal-router/narwhal/cluster"
	"github.com/narwhal-router/narwhal/messages"
	"github.com/narwhal-router/narwhal/node/procs"
	"github.com/narwhal-router/narwhal/transport"
	"github.com/narwhal-router/narwhal/transport/admin"
	"github.com/narwhal-router/narwhal/transport/discovery"
	"github.com/narwhal-router/narwhal/transport/ingress"
	"github.com/narwhal-router/narwhal/transport/memory"
	"github.com/narwhal-router/narwhal/transport/telemetry"
	"github.com/narwhal-router/narwhal/transport/tracing"
)

// Options adjust how a Server starts; the zero value listens where the configuration says.
type Options struct {
	Logger *slog.Logger
	// AccessLog receives one JSON line per request when log.access_log is on.
	AccessLog io.Writer
	// Listener and AdminListener replace server.listen and server.admin_listen (tests pass
	// listeners on free ports).
	Listener      net.Listener
	AdminListener net.Listener
	// Resolver looks up the host names engines are given by, for the check that refuses one
	// resolving to this router (nil: the system's; tests pass a DNS server of their own).
	Resolver transport.Resolver
	// SizeProcs applies server.procs to the process (GOMAXPROCS). Only the process that owns
	// the scheduler sets it — `narwhal serve`, not a test binary hosting a router.
	SizeProcs bool
	// SetMemoryLimit sets the Go runtime's soft memory limit from the memory budget (unless
	// GOMEMLIMIT is set), so that garbage a burst leaves is collected before the process
	// outgrows the budget by much. Only the process that owns the runtime sets it.
	SetMemoryLimit bool
	// LogLevel, when set, is the level Logger's handler reads: a reload changes it
	// (log.level). Without it log.level is fixed at start.
	LogLevel *slog.LevelVar
}

// Server is one running Narwhal.
type Server struct {
	cur       atomic.Pointer[Runtime]
	log       *slog.Logger
	logLevel  *slog.LevelVar
	reporting *telemetry.Reporting
	tracer    *tracing.Tracer // nil: tracing off
	router    *actors.Router
	peers     *cluster.Node // nil without a cluster
	ingress   *ingress.Ingress
	admin     *http.Server
	ln        net.Listener
	adminLn   net.Listener
	served    chan error
	serving   chan struct{} // closed when the client listener's Serve returns
	stopping  atomic.Bool
	stopOnce  sync.Once
	stopErr   error
	procs     *procs.Controller // nil unless server.procs is auto and SizeProcs is set
	budget    *memory.Budget    // server.max_buffered_bytes

	// provision provisions every engine from every source (rt.Provisioner of the start): it
	// knows the ports the listeners were bound to.
	provision transport.Provisioner
	catalog   *discovery.Catalog
	file      *discovery.FileSource
	admins    *discovery.AdminSource
	// draining is set once a shutdown began: /readyz answers 503 while the listener still
	// accepts for server.drain_delay_s; endDrain cuts that delay short.
	draining atomic.Bool
	endDrain chan struct{}
	drainEnd sync.Once

	reloadMu sync.Mutex
	reload   *ReloadStatus // the last reload's outcome; nil before the first
}

// Start builds everything from rt (Provision made it, with the connector registry the process
// runs with), each part from the configuration sections it reads, and begins serving. On
// error nothing is left running.
func Start(rt Runtime, opts Options) (_ *Server, err error) {
	s := &Server{log: opts.Logger, logLevel: opts.LogLevel, served: make(chan error, 2), endDrain: make(chan struct{})}
	s.cur.Store(&rt)
	if s.log == nil {
		s.log = slog.New(slog.DiscardHandler)
	}
	var cleanup []func()
	defer func() {
		if err != nil {
			for i := len(cleanup) - 1; i >= 0; i-- {
				cleanup[i]()
			}
		}
	}()

	cfg := rt.Config
	if s.reporting, err = telemetry.NewReporting(cfg.Metrics); err != nil {
		return nil, err
	}
	cleanup = append(cleanup, func() { s.reporting.Close() })
	// Before any attempt (the join checks start with the router): the Mooncake connector's
	// rechecks and the producer restarts they find are counted and logged.
	rt.Provisioner.Connectors().ObserveBootstrap(bootstrapEvents{metrics: s.reporting.Metrics, log: s.log})
	if opts.SizeProcs {
		fixed, auto, _ := cfg.Server.ProcsPolicy() // validated
		s.procs = sizeProcs(fixed, auto, s.reporting.Metrics, s.log)
		cleanup = append(cleanup, s.procs.Stop)
	}

	var access io.Writer
	if cfg.Log.AccessLog {
		access = opts.AccessLog
	}
	if s.peers, err = cluster.Start(cfg.Cluster, cluster.Options{Logger: s.log, ShutdownGrace: cfg.Server.ShutdownGraceS.Duration()}); err != nil {
		return nil, fmt.Errorf("cluster: %w", err)
	}
	cleanup = append(cleanup, s.peers.Close)
	if s.router, err = actors.NewRouter(cfg, rt.Engines, actors.Options{Metrics: s.reporting.Metrics, Logger: s.log, AccessLog: access,
		Cluster: s.peers}); err != nil {
		return nil, err
	}
	cleanup = append(cleanup, s.router.Close)
	s.peers.Attach(s.router.PeerVerdict)
	// The listeners are bound before any source runs, so that no engine naming one of them —
	// on a port the configuration left to the kernel (0) — is ever provisioned.
	if err := s.listen(cfg, opts); err != nil {
		return nil, err
	}
	cleanup = append(cleanup, s.closeListeners)
	s.provision = rt.Provisioner
	s.provision.Listening(s.listenerAddrs()...)
	resolver := opts.Resolver
	if resolver == nil {
		resolver = net.DefaultResolver
	}
	s.provision.ResolveNames(resolver, telemetry.Throttle(s.log, time.Minute, 10))
	if err := s.startSources(rt); err != nil {
		return nil, err
	}
	cleanup = append(cleanup, s.catalog.Close)

	if s.tracer, err = tracing.New(cfg.Tracing); err != nil {
		return nil, err
	}
	cleanup = append(cleanup, s.shutdownTracer)
	if s.tracer != nil {
		log := s.log
		otel.SetErrorHandler(otel.ErrorHandlerFunc(func(err error) { log.Warn("trace export failed", "error", err.Error()) }))
		s.log.Info("tracing requests", "otlp_endpoint", cfg.Tracing.OTLPEndpoint, "protocol", cfg.Tracing.Protocol,
			"sample_ratio", cfg.Tracing.SampleRatio)
	}
	metrics := s.reporting.Metrics
	budget, budgetFrom := memory.Size(cfg.Server.MaxBufferedBytes)
	s.budget = memory.New(budget, memory.Options{Report: metrics.BufferedBytes})
	if opts.SetMemoryLimit && os.Getenv("GOMEMLIMIT") == "" {
		// The budget and room for everything else the router holds (connections, streams,
		// actors): garbage a burst leaves (answers read in part, then refused) is collected
		// before it takes the process much past the budget. Bodies and answers are pointer-free
		// memory, so a collection near the limit costs little: there is nothing in them to scan.
		limit := budget + 64<<20
		debug.SetMemoryLimit(limit)
		s.log.Info("Go soft memory limit set from the memory budget", "limit_bytes", limit)
	}
	cleanup = append(cleanup, s.budget.Close)
	s.log.Info("memory budget for request bodies and whole answers", "max_buffered_bytes", budget, "from", budgetFrom)
	if s.ingress, err = ingress.NewIngress(cfg.Server, rt.APIKeys, cfg.Request, s.router, s.router, metrics,
		ingress.Options{Logger: s.log, Budget: s.budget, Tracer: s.tracer, Rejections: s.router, Counter: s.router}); err != nil {
		return nil, err
	}
	cleanup = append(cleanup, s.ingress.Close)
	s.ingress.SetFlowControl(cfg.FlowControl)

	s.serving = make(chan struct{})
	go func() {
		err := s.ingress.Serve(s.ln)
		close(s.serving)
		if !s.stopping.Load() {
			s.served <- fmt.Errorf("client listener: %w", err)
		}
	}()
	if s.adminLn != nil {
		s.admin = &http.Server{Handler: admin.Handler(adminFleet{s.router, s}, s.reporting.Prometheus, cfg.Server.AdminToken, s.adminLn.Addr().String()),
			ReadHeaderTimeout: 10 * time.Second, IdleTimeout: cfg.Server.AdminIdleTimeoutS.Duration()}
		go func() {
			if err := s.admin.Serve(s.adminLn); !errors.Is(err, http.ErrServerClosed) {
				s.served <- fmt.Errorf("admin listener: %w", err)
			}
		}()
	}
	return s, nil
}

// Addr is the client listener's address.
func (s *Server) Addr() string { return s.ln.Addr().String() }

// AdminAddr is the admin listener's address, or "" when it is off.
func (s *Server) AdminAddr() string {
	if s.adminLn == nil {
		return ""
	}
	return s.adminLn.Addr().String()
}

// Runtime is the configuration the server runs: as Start provisioned it, with what reloads
// changed since.
func (s *Server) Runtime() Runtime { return *s.cur.Load() }

// Router is the actor router, for dumps and tests.
func (s *Server) Router() *actors.Router { return s.router }

// Failed delivers an error if a listener stops on its own.
func (s *Server) Failed() <-chan error { return s.served }

// Shutdown drains the node as load balancers see it: /readyz answers 503 ("draining") at once
// while the client listener keeps accepting and serving for server.drain_delay_s (EndDrain or
// ctx cut it short), so that balancers following readiness stop sending before anything is
// refused. Then it stops accepting, lets in-flight requests finish within
// server.shutdown_grace_s (or ctx, if sooner), cancels what is left — streams end with a
// terminal error event — and releases everything. Calls after the first wait for it and return
// its result.
func (s *Server) Shutdown(ctx context.Context) error {
	s.stopOnce.Do(func() { s.stopErr = s.shutdown(ctx) })
	return s.stopErr
}

// EndDrain ends the drain delay of a shutdown in progress (or of the next one) at once: the
// listener closes and in-flight requests get their grace.
func (s *Server) EndDrain() { s.drainEnd.Do(func() { close(s.endDrain) }) }

// Draining reports whether a shutdown began.
func (s *Server) Draining() bool { return s.draining.Load() }

func (s *Server) shutdown(ctx context.Context) error {
	srv := s.Runtime().Config.Server
	s.draining.Store(true)
	if d := srv.DrainDelayS.Duration(); d > 0 {
		s.log.Info("draining: /readyz answers 503; the client listener keeps serving until the drain delay ends",
			"drain_delay", d.String(), "in_flight", s.router.InFlight())
		t := time.NewTimer(d)
		select {
		case <-t.C:
		case <-s.endDrain:
		case <-ctx.Done():
		}
		t.Stop()
	}
	s.stopping.Store(true)
	s.catalog.Close() // no more fleet changes: the router is going
	grace, cancel := context.WithTimeout(ctx, srv.ShutdownGraceS.Duration())
	defer cancel()
	err := s.ingress.Shutdown(grace)
	// fasthttp only closes listeners Serve has registered; one that had not started yet would
	// go on accepting, so the listener is closed here too and Serve waited for.
	s.ln.Close()
	select {
	case <-s.serving:
	case <-time.After(5 * time.Second):
		s.log.Error("client listener did not stop")
	}
	if err != nil {
		s.log.Warn("shutdown grace period over; cancelling in-flight requests", "in_flight", s.router.InFlight())
		s.router.AbortAll()
		deadline := time.Now().Add(5 * time.Second)
		for s.router.InFlight() > 0 && time.Now().Before(deadline) {
			time.Sleep(10 * time.Millisecond)
		}
	}
	if s.admin != nil {
		actx, acancel := context.WithTimeout(context.Background(), 2*time.Second)
		s.admin.Shutdown(actx)
		acancel()
	}
	s.ingress.Close()
	s.peers.Close() // leave the cluster before the engine actors stop
	s.router.Close()
	s.shutdownTracer() // every request has ended: its spans are queued
	s.procs.Stop()
	s.budget.Close()
	s.reporting.Close()
	if errors.Is(err, context.DeadlineExceeded) {
		return nil // the grace period ending is the designed path, not a failure
	}
	return err
}

// shutdownTracer exports the spans still queued, for up to tracing.ShutdownTimeout.
func (s *Server) shutdownTracer() {
	ctx, cancel := context.WithTimeout(context.Background(), tracing.ShutdownTimeout)
	defer cancel()
	if err := s.tracer.Shutdown(ctx); err != nil {
		s.log.Warn("spans not exported at shutdown", "error", err.Error())
	}
}

// sizeProcs applies server.procs: every CPU (the runtime's default), a fixed count, or a
// controller that sizes GOMAXPROCS to the load. A GOMAXPROCS environment variable is the
// operator's explicit choice and wins.
func sizeProcs(n int, auto bool, m *telemetry.Metrics, log *slog.Logger) *procs.Controller {
	if env := os.Getenv("GOMAXPROCS"); env != "" && (n > 0 || auto) {
		log.Info("GOMAXPROCS is set in the environment; server.procs is not applied", "gomaxprocs", runtime.GOMAXPROCS(0))
		n, auto = 0, false
	}
	if n > 0 {
		runtime.GOMAXPROCS(n)
	}
	if !auto {
		m.RuntimeProcs(runtime.GOMAXPROCS(0))
		return nil
	}
	return procs.Start(procs.Options{OnChange: func(n int) {
		m.RuntimeProcs(n)
		log.Debug("scheduler resized to the load", "procs", n)
	}})
}

// WaitJoined returns once no engine of the fleet is joining any more — each has passed its
// join check or failed it — or with ctx's error naming the engines still joining. A start no
// longer waits for the engines (a dead one must not keep the node from listening), so code
// that measures the configured fleet from its first request (benchmarks, in-process rigs)
// waits here first.
func (s *Server) WaitJoined(ctx context.Context) error {
	tick := time.NewTicker(10 * time.Millisecond)
	defer tick.Stop()
	for {
		states, err := s.router.Engines(ctx)
		var joining []string
		for _, e := range states {
			if e.State == "joining" {
				joining = append(joining, e.Name)
			}
		}
		if err == nil && len(joining) == 0 {
			return nil
		}
		select {
		case <-ctx.Done():
			if err != nil {
				return fmt.Errorf("engines not joined: %w", err)
			}
			return fmt.Errorf("engines still joining (%s): %w", strings.Join(joining, ", "), ctx.Err())
		case <-tick.C:
		}
	}
}

// adminFleet adapts the actor router and the node's engine sources to what the admin listener
// asks of them.
type adminFleet struct {
	*actors.Router
	s *Server
}

func (a adminFleet) Ready() (bool, string) {
	if a.s.draining.Load() {
		return false, "draining: the node is shutting down; its listener closes once server.drain_delay_s has passed"
	}
	return a.Router.Ready()
}

func (a adminFleet) Tree(ctx context.Context) (admin.Tree, error) { return a.Router.Tree(ctx) }

func (a adminFleet) ClusterStatus() any { return a.Router.Cluster().Status() }

func (a adminFleet) Eject(ctx context.Context, name, reason string) (string, error) {
	state, err := a.Router.Eject(ctx, name, reason)
	return state, adminError(err)
}

func (a adminFleet) Readmit(ctx context.Context, name string, force bool) (string, error) {
	state, err := a.Router.Readmit(ctx, name, force)
	return state, adminError(err)
}

func (a adminFleet) AddEngine(ctx context.Context, body []byte) (messages.EngineState, error) {
	return a.s.addEngine(ctx, body)
}

func (a adminFleet) RemoveEngine(_ context.Context, name string) error { return a.s.removeEngine(name) }

func (a adminFleet) Discovery() any { return a.s.Discovery() }

// adminError marks the router's unknown-engine error as admin.ErrUnknownEngine, keeping its text.
func adminError(err error) error {
	if errors.Is(err, actors.ErrUnknownEngine) {
		return marked{err, admin.ErrUnknownEngine}
	}
	return err
}

// marked is an error that also matches as, for the admin listener's status codes.
type marked struct {
	error
	as error
}

func (m marked) Unwrap() []error { return []error{m.error, m.as} }
