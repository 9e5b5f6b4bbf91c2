package harness

import (
	"errors"
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
}

// Rig is a fleet, a router in front of it and a load generator, each its own process.
type Rig struct {
	Env    Env
	Fleet  *Fleet
	Router *Router
	Peer   *Peer // nil unless RigOptions.Peer
	Gen    *Loadgen
}

// StartRig starts the three processes in order; on error nothing is left running.
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
	if r.Gen, err = StartLoadgen(env, setup, watch...); err != nil {
		return nil, err
	}
	return r, nil
}

// Close stops the generator, the router and the fleet, in that order.
func (r *Rig) Close() {
	if r.Gen != nil {
		r.Gen.Close()
	}
	if r.Router != nil {
		r.Router.Proc.Stop(5 * time.Second)
	}
	if r.Peer != nil {
		r.Peer.Proc.Stop(5 * time.Second)
	}
	if r.Fleet != nil {
		r.Fleet.Proc.Stop(5 * time.Second)
	}
}

// Window is one phase's result with what each process spent during it.
type Window struct {
	Result loadgen.Result
	// Router, Fleet and Gen are the processes' usage deltas (CPU) and end values (RSS); Peer
	// is the peer proxy's, zero when the rig has none.
	Router, Fleet, Gen, Peer Usage
	Wall                     time.Duration
}

// Run runs one phase, sampling every process's CPU right before and right after it (the
// phase ends only once its last request has), so the CPU delta holds all of the phase's work.
func (r *Rig) Run(p loadgen.Phase) (Window, error) { return r.RunEvents(p, nil) }

// RunEvents is Run with a callback for the phase's events.
func (r *Rig) RunEvents(p loadgen.Phase, onEvent func(loadgen.Event)) (Window, error) {
	procs := []*Proc{r.Router.Proc, r.Fleet.Proc, r.Gen.Proc}
	if r.Peer != nil {
		procs = append(procs, r.Peer.Proc)
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
	delta := func(i int) Usage {
		return Usage{CPU: after[i].CPU - before[i].CPU, RSSKiB: after[i].RSSKiB, Threads: after[i].Threads}
	}
	w := Window{Result: res, Router: delta(0), Fleet: delta(1), Gen: delta(2), Wall: wall}
	if r.Peer != nil {
		w.Peer = delta(3)
	}
	return w, nil
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
		m.Router.CPU += w.Router.CPU
		m.Fleet.CPU += w.Fleet.CPU
		m.Gen.CPU += w.Gen.CPU
		m.Peer.CPU += w.Peer.CPU
		m.Router.RSSKiB = max(m.Router.RSSKiB, w.Router.RSSKiB)
		m.Fleet.RSSKiB = max(m.Fleet.RSSKiB, w.Fleet.RSSKiB)
		m.Gen.RSSKiB = max(m.Gen.RSSKiB, w.Gen.RSSKiB)
		m.Peer.RSSKiB = max(m.Peer.RSSKiB, w.Peer.RSSKiB)
		m.Wall += w.Wall
	}
	return m
}
