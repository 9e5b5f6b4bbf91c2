// Package actors owns every decision of the router: the guardian, one actor per engine (breaker,
// probes, placeability), the engine pool with its admission queue, and one request supervisor
// per client request (placement and phase reservations, each attempt's plan and handoff policy,
// retries, the answer before commit, cleanup). Actors carry the control plane only: the request's
// ingress goroutine runs the engine legs a supervisor plans, and tokens flow on the data plane in
// transport.
package actors

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/asynkron/protoactor-go/actor"

	"github.com/narwhal-router/narwhal/actors/health"
	"github.com/narwhal-router/narwhal/actors/placement"
	"github.com/narwhal-router/narwhal/cluster"
	"github.com/narwhal-router/narwhal/config"
	"github.com/narwhal-router/narwhal/messages"
	"github.com/narwhal-router/narwhal/transport"
	"github.com/narwhal-router/narwhal/transport/fault"
	"github.com/narwhal-router/narwhal/transport/ingress"
	"github.com/narwhal-router/narwhal/transport/telemetry"
	"github.com/narwhal-router/narwhal/transport/tokenize"
)

// Options are the router's collaborators; zero values work (no metrics, no logs).
type Options struct {
	Metrics *telemetry.Metrics
	Logger  *slog.Logger
	// AccessLog receives one JSON line per request; nil disables the access log.
	AccessLog io.Writer
	// Cluster shares breaker verdicts with other Narwhal nodes; nil runs this node alone.
	Cluster *cluster.Node
}

// Router is the actor system behind the client API. It implements ingress.Dispatcher.
type Router struct {
	rt      config.Config // the runtime the router started with: what a reload cannot change
	cur     atomic.Pointer[config.Config]
	metrics *telemetry.Metrics
	log     *slog.Logger

	system   *actor.ActorSystem
	root     *actor.RootContext
	guardian *actor.PID
	pool     *actor.PID
	fleet    *placement.Fleet
	// pooled is the pool's state (pool.go); all every engine actor's state, leaving ones
	// included, as the pool last published it.
	pooled  *poolState
	all     atomic.Pointer[[]*engineState]
	cluster *cluster.Node
	// env is what request supervisors use of the router (request.go).
	env *requestEnv

	// requestRoot spawns request supervisors under a guardian that stops, never restarts, them.
	requestRoot *actor.RootContext
	// requestProps are every request supervisor's props: the supervisor learns its exchange
	// from its first message (Dispatch), so one Props serves every request instead of a Props
	// and two closures built per request (issue #17).
	requestProps *actor.Props
	seq          atomic.Uint64
	countSpread  atomic.Uint64 // spreads count_tokens renders over a model's engines
	scraper      *scraper      // placement.scrape_interval_s; nil when off
	kvFeeds      *kvFeeds      // placement.kv_events, engines[].kv_events
}

// NewRouter builds the engine clients from rt and starts the actor system, with rt.Engines as
// the fleet; SetEngines changes it. Every engine joins: it is placed once its join check passes.
func NewRouter(rt config.Config, engines []transport.EngineSpec, opts Options) (*Router, error) {
	r := &Router{rt: rt, metrics: opts.Metrics, log: opts.Logger, cluster: opts.Cluster}
	r.cur.Store(&rt)
	if r.metrics == nil {
		r.metrics = telemetry.Noop()
	}
	if r.log == nil {
		r.log = slog.New(slog.DiscardHandler)
	}
	fr := rt.FleetRuntime()
	exact := placement.NewExactIndex(fr.KVEvents.MaxBlocks)
	r.fleet = placement.NewFleet(placement.NewPrefixIndex(fr.IndexBlocks, exact), nil)
	r.kvFeeds = startKVFeeds(fr.KVEvents, exact, r.metrics, r.log)
	r.all.Store(&[]*engineState{})
	r.pooled = &poolState{initial: engines}
	if fr.ScrapeInterval > 0 {
		r.scraper = startScraper(fr.ScrapeInterval, func() time.Duration { return r.current().Placement.ScrapeTimeoutS.Duration() }, r.metrics)
	}

	if rt.Recovery.ReadmitByHealth() {
		r.log.Warn("readmission by health check (recovery.readmission: health): an ejected engine is readmitted when GET /health answers, even if its generations still hang; for development fleets only")
	} else {
		r.log.Info("readmission by inference probe (recovery.readmission: probe)", "lifecycle_validation", rt.EngineContract != nil)
	}
	logger := r.log
	r.system = actor.NewActorSystem(actor.WithLoggerFactory(func(*actor.ActorSystem) *slog.Logger {
		return slog.New(levelFloor{logger.Handler(), slog.LevelWarn}).With("lib", "protoactor")
	}))
	r.root = r.system.Root
	tokens, err := tokenize.New(rt.Placement.Tokens, r.metrics)
	if err != nil {
		r.scraper.stop()
		r.kvFeeds.stop()
		return nil, err
	}
	r.env = &requestEnv{fleet: r.fleet, root: r.root, metrics: r.metrics, log: r.log, cluster: r.cluster,
		live: &liveSet{}, tokens: tokens}
	r.env.settings.Store(newSettings(rt, nil))
	if opts.AccessLog != nil {
		r.env.access = newAccessLog(opts.AccessLog, rt.Log.AccessLogFlushS.Duration())
	}
	// A crashed request supervisor is stopped, never restarted: its Stopped handler answers the
	// client and releases what it held. A restarted one would have lost track of both.
	r.requestRoot = r.root.Copy().WithGuardian(actor.NewOneForOneStrategy(0, 0, func(reason any) actor.Directive {
		r.log.Error("request supervisor crashed", "panic", fmt.Sprint(reason))
		return actor.StopDirective
	}))
	env := r.env
	r.requestProps = actor.PropsFromProducer(func() actor.Actor { return &requestSupervisor{env: env} }, inline, inlineMailboxes)
	guardian, err := r.root.SpawnNamed(actor.PropsFromProducer(func() actor.Actor { return &guardianActor{r: r} },
		actor.WithSupervisor(actor.NewOneForOneStrategy(10, time.Minute, func(any) actor.Directive { return actor.RestartDirective }))),
		"narwhal")
	if err != nil {
		r.scraper.stop()
		r.kvFeeds.stop()
		return nil, fmt.Errorf("start actor system: %w", err)
	}
	r.guardian = guardian
	// Starting an engine actor builds its client and its metric scopes: a few milliseconds each
	// on a loaded machine, so a thousand-engine fleet needs more than a fixed bound allows.
	startBound := 10*time.Second + time.Duration(len(engines))*20*time.Millisecond
	if _, err := r.root.RequestFuture(guardian, &awaitReady{}, startBound).Result(); err != nil {
		r.scraper.stop()
		r.kvFeeds.stop()
		return nil, fmt.Errorf("start engine actors: %w", err)
	}
	return r, nil
}

// current is the runtime as the last reload left it (Reconfigure).
func (r *Router) current() *config.Config { return r.cur.Load() }

// SetEngines makes specs the fleet, in their order: engines with new names join (placed once
// their join check passes), engines whose names are missing leave (no new placement; their
// streams finish within their deadline, then their actors, prefix-index bits, scrapers and
// metric series go), and an engine whose spec changed in anything but its Source is replaced
// by a new engine of the same name, with a fresh breaker. It returns once the fleet placement
// reads is the new one. Names must be unique (the discovery catalog sees to it).
func (r *Router) SetEngines(ctx context.Context, specs []transport.EngineSpec) error {
	_, err := r.ask(ctx, r.pool, &setEngines{specs: specs})
	return err
}

// Reconfigure applies a reload's run-time settings (config.Reloadable) from next: requests that
// arrive from now on read them (a request in flight keeps the settings it started with), the
// breakers use the recovery settings for their next decision, and probes and join checks the
// contract. What a reload cannot change is never read from next. The engine list is not
// applied here: it reaches the router through its source (SetEngines).
func (r *Router) Reconfigure(next config.Config) {
	r.cur.Store(&next)
	r.env.settings.Store(newSettings(next, r.env.current()))
	r.root.Send(r.pool, &reconfigured{recovery: next.RecoveryRuntime()})
}

// Dispatch spawns the request supervisor for x and hands it x as its first message; the
// supervisor starts the request there (both run on the caller's goroutine: inline dispatcher).
func (r *Router) Dispatch(x *ingress.Exchange) {
	var name [32]byte
	pid, err := r.requestRoot.SpawnNamed(r.requestProps, string(strconv.AppendUint(append(name[:0], "requests/"...), r.seq.Add(1), 10)))
	if err != nil { // unreachable: names come from a counter
		x.Send(ingress.Command{Answer: ingress.Answer{Status: 500}})
		return
	}
	x.Handle = pid
	r.root.Send(pid, x)
}

// ClientGone implements ingress.Dispatcher.
func (r *Router) ClientGone(x *ingress.Exchange) {
	r.root.Send(x.Handle.(*actor.PID), &messages.ClientGone{})
}

// AttemptEnded implements ingress.Dispatcher.
func (r *Router) AttemptEnded(x *ingress.Exchange, m *ingress.AttemptEnded) {
	r.root.Send(x.Handle.(*actor.PID), m)
}

// Finished implements ingress.Dispatcher.
func (r *Router) Finished(x *ingress.Exchange, m *ingress.StreamFinished) {
	r.root.Send(x.Handle.(*actor.PID), m)
}

// Models implements ingress.ModelLister.
func (r *Router) Models() []string { return r.fleet.Load().Models() }

// Parent is model's base model when it is a LoRA adapter an engine lists, "" otherwise.
func (r *Router) Parent(model string) string { return r.fleet.Load().Parent(model) }

// Engines returns every engine actor's state: the fleet's engines in their sources' order,
// then the engines leaving it (state "removing") while their last requests finish.
func (r *Router) Engines(ctx context.Context) ([]messages.EngineState, error) {
	states, err := r.describeEngines(ctx)
	if err != nil {
		return nil, err
	}
	out := make([]messages.EngineState, len(states))
	for i, s := range states {
		out[i] = *s.state
	}
	return out, nil
}

type described struct {
	st    *engineState
	state *messages.EngineState
}

// leavingAnswerWait bounds the wait for a leaving engine's state: its actor answers at once
// while it drains, and says nothing once stopped.
const leavingAnswerWait = time.Second

// describeEngines asks every engine actor for its state, all at once. One that stopped
// meanwhile (a leaving engine whose last request ended) is left out.
func (r *Router) describeEngines(ctx context.Context) ([]described, error) {
	all := *r.all.Load()
	futures := make([]*actor.Future, len(all))
	timeout := 5 * time.Second
	if d, ok := ctx.Deadline(); ok {
		timeout = time.Until(d)
	}
	if timeout <= 0 {
		return nil, context.DeadlineExceeded
	}
	for i, st := range all {
		wait := timeout
		if st.view.Removed.Load() {
			// A leaving engine's actor may stop with the question in its mailbox, unanswered.
			wait = min(wait, leavingAnswerWait)
		}
		futures[i] = r.root.RequestFuture(pidOf(st.view), &messages.Describe{}, wait)
	}
	out := make([]described, 0, len(all))
	for i, f := range futures {
		res, err := f.Result()
		switch {
		case err != nil && all[i].view.Removed.Load(): // it left, and its actor stopped meanwhile
			continue
		case err != nil:
			return nil, fmt.Errorf("engine %s: %w", all[i].spec.Name, err)
		}
		out = append(out, described{all[i], res.(*messages.EngineState)})
	}
	return out, nil
}

// Requests returns the state of every live request supervisor. All are asked at once; one that
// finishes meanwhile may drop the question unanswered, so the wait for stragglers is short.
func (r *Router) Requests(ctx context.Context) []messages.RequestState {
	timeout := time.Second
	if d, ok := ctx.Deadline(); ok && time.Until(d) < timeout {
		timeout = time.Until(d)
	}
	var futures []*actor.Future
	for _, pid := range r.env.live.snapshot() {
		futures = append(futures, r.root.RequestFuture(pid, &messages.Describe{}, timeout))
	}
	out := make([]messages.RequestState, 0, len(futures))
	for _, f := range futures {
		res, err := f.Result()
		if err != nil {
			continue // it finished while we asked
		}
		out = append(out, *res.(*messages.RequestState))
	}
	return out
}

// ErrUnknownEngine is returned for an engine name that is not configured.
var ErrUnknownEngine = errors.New("no such engine")

// Eject takes an engine out of placement until an operator readmits it; no probe does.
func (r *Router) Eject(ctx context.Context, name, reason string) (string, error) {
	return r.admin(ctx, name, &messages.Eject{Reason: reason})
}

// Readmit readmits an engine an operator ejected at once; an engine ejected by its failures is
// probed now (and readmitted on success), or readmitted at once when force is set.
func (r *Router) Readmit(ctx context.Context, name string, force bool) (string, error) {
	return r.admin(ctx, name, &messages.Readmit{Force: force})
}

func (r *Router) admin(ctx context.Context, name string, msg any) (string, error) {
	v := r.fleet.Load().Engine(name)
	if v == nil {
		return "", fmt.Errorf("%w: %q", ErrUnknownEngine, name)
	}
	res, err := r.ask(ctx, pidOf(v), msg)
	if err != nil {
		return "", err
	}
	d := res.(*messages.AdminDone)
	if d.Err != "" {
		return d.State, errors.New(d.Err)
	}
	return d.State, nil
}

// Ready reports whether the router can serve requests: every role the disaggregation policy
// needs has an admitted engine — prefill and decode under always, decode under auto and never
// (auto decodes on the consumer alone when no producer is admitted). While it cannot, reason
// says which role lacks one and where that role's engines stand.
func (r *Router) Ready() (ready bool, reason string) {
	f := r.fleet.Load()
	policy := r.current().Disaggregation.Policy
	phases := []fault.Phase{fault.PhaseDecode}
	if policy == config.DisaggAlways {
		phases = []fault.Phase{fault.PhasePrefill, fault.PhaseDecode}
	}
	var missing []string
	for _, phase := range phases {
		var states []string
		admittedOne := false
		for _, v := range f.Engines {
			if !v.CanServe(phase) {
				continue
			}
			if v.Placeable.Load() {
				admittedOne = true
				break
			}
			state := v.Name + " " + health.State(v.State.Load()).String()
			if why := v.Why.Load(); why != nil {
				state += " [" + *why + "]"
			}
			states = append(states, state)
		}
		if admittedOne {
			continue
		}
		why := "no engine of the fleet can run it"
		if len(states) > 0 {
			why = strings.Join(states, ", ")
		}
		missing = append(missing, fmt.Sprintf("no admitted engine can run the %s leg (%s)", phase, why))
	}
	if len(missing) == 0 {
		return true, ""
	}
	return false, strings.Join(missing, "; ") + fmt.Sprintf("; disaggregation.policy %s needs %s", policy, needs(phases))
}

func needs(phases []fault.Phase) string {
	if len(phases) == 2 {
		return "an admitted prefill and an admitted decode engine"
	}
	return "an admitted decode engine"
}

// InFlight is the number of live request supervisors.
func (r *Router) InFlight() int {
	return r.env.live.len()
}

// AbortAll cancels every live request (the end of a shutdown grace period): streams end with
// a terminal error event, requests before commit get 503.
func (r *Router) AbortAll() {
	for _, pid := range r.env.live.snapshot() { // outside the lock: an inline supervisor may finish and remove itself
		r.root.Send(pid, &messages.Abort{})
	}
}

// Close stops the actor system and closes engine connections. Call it after ingress is down.
func (r *Router) Close() {
	r.scraper.stop()
	r.kvFeeds.stop()
	r.root.StopFuture(r.guardian).Wait()
	for _, st := range *r.all.Load() {
		st.timers.stop()
		st.view.Client.Close()
	}
	r.system.Shutdown()
	r.env.tokens.Close()
	if r.env.access != nil {
		r.env.access.close()
	}
}

func (r *Router) ask(ctx context.Context, pid *actor.PID, msg any) (any, error) {
	timeout := 5 * time.Second
	if d, ok := ctx.Deadline(); ok {
		timeout = time.Until(d)
	}
	if timeout <= 0 {
		return nil, context.DeadlineExceeded
	}
	return r.root.RequestFuture(pid, msg, timeout).Result()
}

// inline runs an actor's mailbox on the goroutine that sent it a message, instead of starting a
// goroutine per mailbox run (protoactor's default). The mailbox still processes one message at
// a time; what changes is who pays for it. Narwhal's actors never block (legs run on ingress
// goroutines, probes on their own), so a sender is delayed by the receiver's handling only, and
// a request no longer costs a goroutine start and an OS-thread wake-up per message — on the
// benchmark machine those hand-offs were most of the router's CPU per request.
var inline = actor.WithDispatcher(actor.NewSynchronizedDispatcher(300))

// levelFloor drops records below a level: protoactor logs every dead letter at info, and a
// message to a request that just finished is routine, not news.
type levelFloor struct {
	slog.Handler
	floor slog.Level
}

func (h levelFloor) Enabled(ctx context.Context, l slog.Level) bool {
	return l >= h.floor && h.Handler.Enabled(ctx, l)
}

func (h levelFloor) WithAttrs(attrs []slog.Attr) slog.Handler {
	return levelFloor{h.Handler.WithAttrs(attrs), h.floor}
}

func (h levelFloor) WithGroup(name string) slog.Handler {
	return levelFloor{h.Handler.WithGroup(name), h.floor}
}

// liveSet is the set of live request supervisors: a map under a mutex, because a sync.Map
// allocated an entry and a boxed key per request (issue #17). Callers that message the
// supervisors iterate a snapshot, since a supervisor running inline may remove itself.
type liveSet struct {
	mu  sync.Mutex
	set map[*actor.PID]struct{}
}

func (l *liveSet) add(pid *actor.PID) {
	l.mu.Lock()
	if l.set == nil {
		l.set = make(map[*actor.PID]struct{})
	}
	l.set[pid] = struct{}{}
	l.mu.Unlock()
}

func (l *liveSet) remove(pid *actor.PID) {
	l.mu.Lock()
	delete(l.set, pid)
	l.mu.Unlock()
}

func (l *liveSet) len() int {
	l.mu.Lock()
	defer l.mu.Unlock()
	return len(l.set)
}

func (l *liveSet) snapshot() []*actor.PID {
	l.mu.Lock()
	defer l.mu.Unlock()
	out := make([]*actor.PID, 0, len(l.set))
	for pid := range l.set {
		out = append(out, pid)
	}
	return out
}
