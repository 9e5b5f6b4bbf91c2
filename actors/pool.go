package actors

import (
	"strconv"
	"sync/atomic"
	"time"

	"github.com/asynkron/protoactor-go/actor"

	"github.com/narwhal-router/narwhal/actors/health"
	"github.com/narwhal-router/narwhal/actors/placement"
	"github.com/narwhal-router/narwhal/config"
	"github.com/narwhal-router/narwhal/messages"
	"github.com/narwhal-router/narwhal/transport"
	"github.com/narwhal-router/narwhal/transport/fault"
)

// poolActor is the parent of the engine actors and the admission queue: requests that found no
// engine with room wait here, in arrival order, until an engine frees a slot. It owns the
// fleet's membership: it adds and removes engine actors as the desired set changes (setEngines)
// and is the only writer of the fleet snapshot placement reads.
type poolActor struct {
	r *Router
	*poolState
}

// poolState is what the pool owns. It lives outside the actor value, so that a restarted pool
// carries on with the same fleet and queue (its engine actors are started again with their
// own state).
type poolState struct {
	self    *actor.PID
	initial []transport.EngineSpec
	started bool
	// members are the engines of the fleet by name, in order; leaving are the removed ones
	// whose last requests are still running.
	members map[string]*engineState
	order   []*engineState
	leaving map[*engineState]bool
	// incarnations numbers every engine added.
	incarnations uint64

	// queue is the admission queue (queue.go): the requests that found no engine with room.
	queue admissionQueue
	// breaker is each engine's last reported breaker state; inWave marks a role whose engines
	// were all ejected and restarted together, until one of them is admitted again.
	breaker map[string]string
	inWave  [2]bool
	// byAdmin marks engines an operator ejected; cause is what ejected each engine.
	byAdmin map[string]bool
	cause   map[string]string
	// tally counts the members by breaker state (pooltally.go).
	tally stateTally

	// partnerChanges counts the changes that may let a waiting join check complete: an
	// engine admitted or leaving joining. Written by the pool alone; an engine actor reads it
	// when its check starts and ends, and retries at once when it moved meanwhile.
	partnerChanges atomic.Uint64
	// waiting are the joining engines whose check ended waiting for a partner (joinWaiting):
	// the next partner change nudges them, once.
	waiting map[*actor.PID]bool
}

// awaitReady is answered once the pool's engine actors exist.
type awaitReady struct{}

// setEngines makes specs the fleet (SetEngines); answered with true once applied.
type setEngines struct{ specs []transport.EngineSpec }

// engineDrained is a leaving engine's word that its last reservation is back.
type engineDrained struct{ st *engineState }

// reconfigured tells the pool a reload changed the settings: the engine actors get theirs.
type reconfigured struct{ recovery config.RecoveryRuntime }

// engineSupervision restarts a crashed engine actor; its state lives outside the actor value,
// so the breaker and the reservations survive the restart.
var engineSupervision = actor.NewOneForOneStrategy(100, time.Minute, func(any) actor.Directive {
	return actor.RestartDirective
})

func (p *poolActor) Receive(ctx actor.Context) {
	switch m := ctx.Message().(type) {
	case *actor.Started:
		p.self = ctx.Self()
		if p.started { // restarted after a crash: its children were stopped with it
			clear(p.waiting) // their checks retry on their probe cadence
			for _, st := range p.order {
				p.spawn(ctx, st)
			}
			for st := range p.leaving {
				p.spawn(ctx, st)
			}
			return
		}
		p.started = true
		p.members, p.leaving = map[string]*engineState{}, map[*engineState]bool{}
		p.breaker, p.byAdmin, p.cause = map[string]string{}, map[string]bool{}, map[string]string{}
		p.waiting = map[*actor.PID]bool{}
		p.apply(ctx, p.initial)
		p.initial = nil
	case *awaitReady:
		ctx.Respond(true)
	case *setEngines:
		p.apply(ctx, m.specs)
		ctx.Respond(true)
	case *engineDrained:
		if p.leaving[m.st] {
			m.st.drained = true
			ctx.Stop(pidOf(m.st.view))
		}
	case *actor.Terminated:
		for st := range p.leaving {
			if st.drained && pidOf(st.view).Equal(m.Who) { // not a child stopped by the pool's own restart
				p.gone(st)
			}
		}
	case *reconfigured:
		for _, st := range p.order {
			ctx.Send(pidOf(st.view), reconfigure{m.recovery})
		}
		p.reconfigureQueue(ctx)
	case *messages.AwaitCapacity:
		p.enqueue(ctx, m)
	case *messages.StopWaiting:
		p.dequeue(ctx, ctx.Sender())
	case *messages.WakeSettled:
		p.settle(ctx, ctx.Sender())
	case *promiseCheck:
		p.onPromiseCheck(ctx, m)
	case *ranksFound:
		p.onRanksFound(m)
	case *messages.CapacityFreed:
		if v := p.r.fleet.Load().Engine(m.Engine); v != nil && v.Placeable.Load() {
			p.wake(ctx, v)
		}
	case *messages.EngineChanged:
		st := p.members[m.Engine]
		if st == nil || st.incarnation != m.Incarnation {
			return // a removed engine's last word: the fleet has no such engine now
		}
		prev := p.breaker[m.Engine]
		p.breaker[m.Engine], p.byAdmin[m.Engine], p.cause[m.Engine] = m.State, m.ByAdmin, m.Cause
		p.tally.move(st.view, prev, m.State)
		if m.Placeable && m.HasRoom {
			p.wake(ctx, st.view)
		}
		if prev == health.Joining.String() || m.Placeable {
			p.nudgeJoining(ctx)
		}
		p.checkWaves(ctx)
		p.countStates()
	case joinWaiting:
		if m.changes != p.partnerChanges.Load() {
			ctx.Send(m.engine, partnerReady{}) // a partner changed after its check looked
		} else {
			p.waiting[m.engine] = true
		}
	}
}

// apply makes specs (each with its source) the fleet: an engine whose name is new is added, one
// whose name is gone is removed, and one whose spec changed (URL, role, KV identity, models,
// connector, anything but its source) is removed and added again, with a fresh breaker. An
// added engine joins: it is placed once its join check passes. A removed engine takes no new
// placement; its requests finish within their deadline, then its actor stops and its prefix
// index bit, scraper and metric series go (gone).
func (p *poolActor) apply(ctx actor.Context, specs []transport.EngineSpec) {
	want := make(map[string]transport.EngineSpec, len(specs))
	order := make([]string, 0, len(specs))
	for _, s := range specs {
		if _, dup := want[s.Name]; dup {
			p.r.log.Error("the desired fleet names an engine twice; keeping the first", "engine", s.Name)
			continue
		}
		want[s.Name] = s
		order = append(order, s.Name)
	}
	var removed, added []string
	for _, st := range p.order {
		s, keep := want[st.spec.Name]
		switch {
		case !keep:
			removed = append(removed, st.spec.Name)
			p.remove(ctx, st, "no source reports it")
		case !transport.SameEngine(st.spec, s):
			removed = append(removed, st.spec.Name)
			p.remove(ctx, st, "its configuration changed: it is added again as a new engine")
		case st.reportedBy != s.Source:
			p.r.log.Info("engine now reported by another source", "engine", s.Name, "from", st.reportedBy, "to", s.Source)
			st.reportedBy = s.Source
			ctx.Send(pidOf(st.view), setSource{s.Source}) // the engine actor owns source
		}
	}
	next := make([]*engineState, 0, len(order))
	var joined []*engineState
	for _, name := range order {
		st := p.members[name]
		if st == nil {
			st = p.add(want[name])
			joined = append(joined, st)
			added = append(added, name)
		}
		next = append(next, st)
	}
	p.order = next
	p.warnUnpinned(joined)
	// The new engines are in the fleet placement reads before their actors start: a join check
	// plans with the fleet it is part of (a consumer waits for a producer joining beside it).
	// They are joining, so no placement reaches them; their actor address is set once it
	// exists (Engine.SetActor). The list /engines, the tree dump and WaitJoined ask is
	// published only after every actor in it exists: each of its engines can be asked.
	p.r.fleet.Publish(p.views())
	for _, st := range joined {
		p.spawn(ctx, st)
		p.r.scraper.add(st.view, p.ranksFinder(st))
		p.r.kvFeeds.add(st.view, st.spec)
	}
	p.publish()
	if len(added)+len(removed) > 0 {
		p.r.log.Info("fleet changed", "added", added, "removed", removed, "engines", len(next))
	}
	if len(removed) > 0 {
		p.wakeAll(ctx) // a queued request may have lost the only engines of its model: let it re-place
		p.checkWaves(ctx)
	}
	p.countStates()
}

// warnUnpinned says, in one line per fleet change, which added producers have no pinned KV
// endpoint. Their descriptors may only point consumers at their own host (transport/kv's
// endpoint policy), but an operator should know; a discovery burst of thousands of producers
// writes one line, not thousands.
func (p *poolActor) warnUnpinned(joined []*engineState) {
	var names []string
	n := 0
	for _, st := range joined {
		if spec := st.spec; spec.Role.CanPrefill() && spec.KV.Endpoint == "" && len(spec.KV.AllowedEndpoints) == 0 {
			if n++; len(names) < 8 {
				names = append(names, spec.Name)
			}
		}
	}
	if n > 0 {
		p.r.log.Warn("producers' KV endpoints are not pinned: their descriptors may name only their own host, on kv.allowed_ports; "+
			"set engines[].kv.endpoint or kv.allowed_endpoints", "producers", n, "first", names)
	}
}

// add makes a member of spec, joining; its actor is started by apply.
func (p *poolActor) add(spec transport.EngineSpec) *engineState {
	r := p.r
	p.incarnations++
	v := &placement.Engine{Idx: r.fleet.Index.TakeSlot(), Name: spec.Name, Role: spec.Role, MaxInflight: spec.MaxInflight,
		Client: transport.NewEngineClient(spec, r.rt.Engine, r.rt.Server.MaxResponseBytes)}
	if len(spec.Models) > 0 {
		ms := append([]string(nil), spec.Models...)
		v.Models.Store(&ms)
	}
	if spec.DataParallelSize > 1 {
		p.makeRanks(v, spec.DataParallelSize)
	}
	v.State.Store(uint32(health.Joining))
	st := &engineState{spec: spec, view: v, incarnation: p.incarnations, source: spec.Source, reportedBy: spec.Source,
		breaker: health.NewBreaker(r.current().RecoveryRuntime())}
	if v.Idx < 0 {
		r.log.Warn("engine placed without prefix preference: every prefix-index slot is held", "engine", spec.Name, "slots", placement.MaxIndexed)
	}
	r.metrics.RememberEngine(spec.Name)
	r.metrics.ServeModels(spec.Models) // configured models; discovered ones as the engine lists them
	st.actorName = spec.Name
	for st2 := range p.leaving {
		if st2.actorName == st.actorName {
			// The engine's previous incarnation is still draining under its name.
			st.actorName = spec.Name + "~" + strconv.FormatUint(p.incarnations, 10)
		}
	}
	p.members[spec.Name] = st
	p.breaker[spec.Name] = health.Joining.String() // its first change, to whatever, may be what a joining consumer waits for
	p.tally.move(v, "", health.Joining.String())
	return st
}

// spawn starts st's engine actor.
func (p *poolActor) spawn(ctx actor.Context, st *engineState) {
	props := actor.PropsFromProducer(func() actor.Actor { return &engineActor{r: p.r, st: st} }, inline)
	pid, err := ctx.SpawnNamed(props, st.actorName)
	if err != nil {
		panic(err) // names are unique: a clash is a programming error
	}
	st.view.SetActor(pid)
}

// remove takes an engine out of the fleet: out of the members (so out of the next snapshot),
// its scraper stopped, its actor told to drain.
func (p *poolActor) remove(ctx actor.Context, st *engineState, why string) {
	name := st.spec.Name
	delete(p.members, name)
	p.tally.move(st.view, p.breaker[name], "")
	delete(p.breaker, name)
	delete(p.byAdmin, name)
	delete(p.cause, name)
	p.leaving[st] = true
	p.r.scraper.remove(st.view)
	p.r.kvFeeds.remove(st.view)
	p.r.log.Info("engine removed from the fleet", "engine", name, "source", st.reportedBy, "why", why)
	ctx.Send(pidOf(st.view), retire{drainBy: time.Now().Add(p.r.env.current().request.Deadline + drainSlack)})
}

// drainSlack is how much longer than the request deadline a leaving engine waits for its last
// request: the deadline plus the second a client write may run past it.
const drainSlack = 2 * time.Second

// gone finishes a removal once the leaving engine's actor has stopped: its connections close,
// its prefix-index bit is taken back (purged before it is handed out again) and, unless an
// engine of the same name has joined meanwhile, its metric series are forgotten.
func (p *poolActor) gone(st *engineState) {
	delete(p.leaving, st)
	st.timers.stop()
	st.view.Client.Close()
	p.r.fleet.Index.Retire(st.view.Idx)
	p.retireRanks(st.view)
	if p.members[st.spec.Name] == nil {
		p.r.metrics.ForgetEngine(st.spec.Name)
	}
	p.publish()
	p.countStates()
	p.r.log.Info("engine gone", "engine", st.spec.Name)
}

// publish makes the members the fleet placement reads, and the list /engines shows (the members,
// then the leaving engines).
func (p *poolActor) publish() {
	all := make([]*engineState, 0, len(p.order)+len(p.leaving))
	all = append(all, p.order...)
	for st := range p.leaving {
		all = append(all, st)
	}
	p.r.fleet.Publish(p.views())
	p.r.all.Store(&all)
}

// views are the members' engine records, in order.
func (p *poolActor) views() []*placement.Engine {
	views := make([]*placement.Engine, len(p.order))
	for i, st := range p.order {
		views[i] = st.view
	}
	return views
}

// countStates publishes how many engines are in each lifecycle state.
func (p *poolActor) countStates() {
	for _, s := range []health.State{health.Admitted, health.Quarantined, health.Ejected, health.Probing, health.Joining} {
		p.r.metrics.FleetEngines(s.String(), p.tally.byState[s.String()])
	}
	p.r.metrics.FleetEngines(stateRemoving, len(p.leaving))
}

// nudgeJoining records a change that may let a waiting join check complete (an engine admitted
// or leaving joining) and tells the engines waiting for one: each tries its check again now
// rather than at its next probe. A check in flight sees the count move when it ends.
func (p *poolActor) nudgeJoining(ctx actor.Context) {
	p.partnerChanges.Add(1)
	for pid := range p.waiting {
		ctx.Send(pid, partnerReady{})
	}
	clear(p.waiting)
}

// checkWaves applies the whole-wave policy: when every engine able to run a phase is ejected
// at once, the fault is fleet-wide (a bad deploy, a network partition), so the engine actors of
// that wave are restarted together and all probed at once instead of one by one on their
// backed-off cadences. Requests meanwhile get fast 503s (no admitted engine) rather than
// queueing. Probes still decide readmission, engine by engine. Engines an operator ejected are
// not part of a wave: they stay out until the operator readmits them, and a role ejected
// entirely by its operator is maintenance, not a fault. A joining engine is not ejected: while
// one joins, its role is not a wave.
func (p *poolActor) checkWaves(ctx actor.Context) {
	for _, phase := range []fault.Phase{fault.PhasePrefill, fault.PhaseDecode} {
		if !p.tally.allDown(phase) { // the common case, without a walk of the fleet
			p.inWave[phase] = false
			continue
		}
		if p.inWave[phase] {
			continue // restarted already: nothing to do until one of them is back
		}
		var wave []*actor.PID
		var names, causes []string
		all := true
		for _, st := range p.order {
			v := st.view
			if !v.CanServe(phase) {
				continue
			}
			if s := p.breaker[v.Name]; s != health.Ejected.String() && s != health.Probing.String() {
				all = false
				break
			}
			if p.byAdmin[v.Name] {
				continue
			}
			wave = append(wave, pidOf(v))
			names = append(names, v.Name)
			causes = append(causes, v.Name+": "+p.cause[v.Name])
		}
		switch {
		case !all || len(wave) == 0:
			p.inWave[phase] = false
		case !p.inWave[phase]:
			p.inWave[phase] = true
			p.r.metrics.WaveRestart(phase.String())
			p.r.log.Warn("every engine of a role is ejected: restarting the wave and probing it", "role", phase.String(),
				"engines", names, "failures", causes)
			ctx.(actor.Supervisor).RestartChildren(wave...)
			for _, pid := range wave {
				ctx.Send(pid, &messages.ProbeNow{})
			}
		}
	}
}

// pidOf is v's engine actor, nil until the pool has started it.
func pidOf(v *placement.Engine) *actor.PID {
	pid, _ := v.Actor().(*actor.PID)
	return pid
}
