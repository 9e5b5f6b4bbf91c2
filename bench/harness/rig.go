package harness

import (
	"errors"
	"fmt"
	"time"

	"github.com/narwhal-router/narwhal/bench/loadgen"
)

// RigOptions shape one rig.
type RigOptions struct {
	Fleet  FleetOptions
	Router RouterConfig
	// MaxConns caps the generator's connections to the router (default 20,000).
	MaxConns int
	// Peer also starts the peer proxy (bench/peer) in front of the same fleet.
	Peer bool
	// Baseline, when set, is a second router binary started as the "baseline" process with
	// the same configuration (its own ports) in front of the same fleet: the A/B arm.
	Baseline string
	// BaselineTraced turns tracing on for the baseline router alone, exporting every request's
	// spans to a TraceSink the rig starts: the A/B of tracing off and on.
	BaselineTraced bool
	// Listed picks the fleet's engines the router's configuration file lists (nil: all); the
	// others can join it at run time (POST /engines), as the churn scenario has them do.
	Listed func(all []loadgen.Engine) []loadgen.Engine
}

// Rig is a fleet, a router in front of it and a load generator, each its own process.
type Rig struct {
	Env    Env
	Fleet  *Fleet
	Router *Router
	Peer   *Peer // nil unless RigOptions.Peer
	// Baseline is the second router, nil unless RigOptions.Baseline.
	Baseline *Router
	// Traces receives the baseline's spans, nil unless RigOptions.BaselineTraced.
	Traces *TraceSink
	Gen    *Loadgen
}

// StartRig starts the processes in order (fleet, router, the peer and the baseline router
// when asked, generator); on error nothing is left running.
func StartRig(env Env, o RigOptions) (_ *Rig, err error) {
	r := &Rig{Env: env}
	defer func() {
		if err != nil {
			r.Close()
		}
	}()
	if r.Fleet, err = StartFleet(env, o.Fleet); err != nil {
		return nil, err
	}
	rc := o.Router
	rc.Engines = r.Fleet.Engines
	if o.Listed != nil {
		rc.Engines = o.Listed(r.Fleet.Engines)
	}
	if r.Router, err = StartRouter(env, rc); err != nil {
		return nil, err
	}
	setup := loadgen.Setup{Router: r.Router.Addr, Engines: r.Fleet.Engines, Model: Model,
		Timeouts: r.Router.Config.Engine, MaxConns: o.MaxConns}
	watch := []*Proc{r.Router.Proc, r.Fleet.Proc}
	if o.Peer {
		if r.Peer, err = StartPeer(env, r.Fleet.Engines); err != nil {
			return nil, err
		}
		setup.Peer = r.Peer.Addr
		watch = append(watch, r.Peer.Proc)
	}
	if o.Baseline != "" {
		// The configuration the router got (StartRouterAs picks its own ports): the two builds
		// differ in their code only, or in tracing alone.
		bc := rc
		if o.BaselineTraced {
			if r.Traces, err = StartTraceSink(); err != nil {
				return nil, err
			}
			bc.TracingEndpoint = r.Traces.Endpoint()
		}
		if r.Baseline, err = StartRouterAs(env, "baseline", o.Baseline, bc); err != nil {
			return nil, fmt.Errorf("baseline router: %w", err)
		}
		setup.Baseline = r.Baseline.Addr
		watch = append(watch, r.Baseline.Proc)
	}
	if r.Gen, err = StartLoadgen(env, setup, watch...); err != nil {
		return nil, err
	}
	return r, nil
}

// Close stops the generator, the routers, the peer and the fleet, in that order.
func (r *Rig) Close() {
	if r.Gen != nil {
		r.Gen.Close()
	}
	if r.Router != nil {
		r.Router.Proc.Stop(5 * time.Second)
	}
	if r.Baseline != nil {
		r.Baseline.Proc.Stop(5 * time.Second)
	}
	if r.Peer != nil {
		r.Peer.Proc.Stop(5 * time.Second)
	}
	if r.Traces != nil {
		r.Traces.Close()
	}
	if r.Fleet != nil {
		r.Fleet.Proc.Stop(5 * time.Second)
	}
}

// Window is one phase's result with what each process spent during it.
type Window struct {
	Result loadgen.Result
	// Router, Fleet and Gen are the processes' usage deltas (CPU) and end values (RSS); Peer
	// and Baseline are the peer proxy's and the second router's, zero when the rig has none.
	Router, Fleet, Gen, Peer, Baseline Usage
	Wall                               time.Duration
}

// ProxyUsage is the usage of the process that served arm's requests in the window: the
// router, the peer proxy or the baseline router; zero for direct, which has none.
func (w Window) ProxyUsage(arm loadgen.Arm) Usage {
	switch arm {
	case loadgen.Routed:
		return w.Router
	case loadgen.Peer:
		return w.Peer
	case loadgen.Baseline:
		return w.Baseline
	}
	return Usage{}
}

// Run runs one phase, sampling every process's CPU right before and right after it (the
// phase ends only once its last request has), so the CPU delta holds all of the phase's work.
func (r *Rig) Run(p loadgen.Phase) (Window, error) { return r.RunEvents(p, nil) }

// RunEvents is Run with a callback for the phase's events.
func (r *Rig) RunEvents(p loadgen.Phase, onEvent func(loadgen.Event)) (Window, error) {
	var w Window
	procs := []*Proc{r.Router.Proc, r.Fleet.Proc, r.Gen.Proc}
	into := []*Usage{&w.Router, &w.Fleet, &w.Gen} // where each process's usage goes
	if r.Peer != nil {
		procs, into = append(procs, r.Peer.Proc), append(into, &w.Peer)
	}
	if r.Baseline != nil {
		procs, into = append(procs, r.Baseline.Proc), append(into, &w.Baseline)
	}
	before, err := usages(procs)
	if err != nil {
		return Window{}, errors.Join(err, firstDeath(procs...))
	}
	t0 := time.Now()
	res, err := r.Gen.Run(p, onEvent)
	wall := time.Since(t0)
	if err != nil {
		return Window{}, err
	}
	after, err := usages(procs)
	if err != nil {
		return Window{}, errors.Join(err, firstDeath(procs...))
	}
	for i, u := range into {
		*u = Usage{CPU: after[i].CPU - before[i].CPU, RSSKiB: after[i].RSSKiB, Threads: after[i].Threads}
	}
	w.Result, w.Wall = res, wall
	return w, nil
}

// add merges another window's usage of the same process: CPU adds up, RSS is the peak.
func (u *Usage) add(o Usage) {
	u.CPU += o.CPU
	u.RSSKiB = max(u.RSSKiB, o.RSSKiB)
}

func usages(procs []*Proc) ([]Usage, error) {
	out := make([]Usage, len(procs))
	for i, p := range procs {
		u, err := ReadUsage(p.Pid())
		if err != nil {
			return nil, err
		}
		out[i] = u
	}
	return out, nil
}

// Merge adds windows of one arm together.
func Merge(ws ...Window) Window {
	var m Window
	for i, w := range ws {
		if i == 0 {
			m.Result = loadgen.Result{Phase: w.Result.Phase, Arm: w.Result.Arm}
		}
		m.Result.Merge(&w.Result)
		m.Router.add(w.Router)
		m.Fleet.add(w.Fleet)
		m.Gen.add(w.Gen)
		m.Peer.add(w.Peer)
		m.Baseline.add(w.Baseline)
		m.Wall += w.Wall
	}
	return m
}
