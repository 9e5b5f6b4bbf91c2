package actors

import (
	"context"
	"errors"
	"time"

	"github.com/asynkron/protoactor-go/actor"

	"github.com/narwhal-router/narwhal/actors/health"
	"github.com/narwhal-router/narwhal/actors/placement"
	"github.com/narwhal-router/narwhal/config"
	"github.com/narwhal-router/narwhal/messages"
	"github.com/narwhal-router/narwhal/transport"
)

// engineState is everything one engine actor owns. It lives outside the actor value so that a
// restarted actor (after a panic) carries on with the same breaker; the reservations live in
// the view, where supervisors take them.
//
// Writers: the pool makes the value (spec, view, incarnation, source, reportedBy, breaker,
// actorName are set before it starts the actor, and spec, view, incarnation and actorName
// never change after); from then on every field is the engine actor's alone (its Receive),
// except reportedBy and drained, which are the pool's alone.
type engineState struct {
	spec transport.EngineSpec
	view *placement.Engine
	// incarnation tells apart engines of one name: one removed and one added again under it
	// (the pool numbers every engine it adds).
	incarnation uint64
	// source is where the engine was found, shown in /engines. Writer: the engine actor (the
	// pool tells it when another source takes the same engine over: setSource).
	source string
	// reportedBy is the source the pool last saw report the engine, which it compares with the
	// next report. Writer: the pool.
	reportedBy string
	// breaker is the engine's health.Breaker. Writer: the engine actor; the policy decides,
	// the actor applies and publishes (publish).
	breaker health.Breaker
	// lastProbe is the outcome of the newest readmission probe; joinCheck of the newest join
	// check (kept once the engine is admitted, for /engines).
	lastProbe *messages.Probe
	joinCheck *messages.Probe
	// readFailed are the producers whose handoff this consumer's inconclusive check could not
	// read (probe.go): when a later check passes with another producer, those pairs are at fault.
	readFailed []pairRefused
	restarts   int
	// probeGen identifies the probe or join check in flight; an outcome for another
	// generation is stale. checking says a join check is in flight.
	probeGen int
	checking bool
	// joinChanges is poolState.partnerChanges when the join check in flight started: when it
	// moved by the time the check ends inconclusive, the check is retried at once.
	joinChanges uint64
	// started is set once the actor first started: a cluster verdict about the engine is
	// applied then, once (a restart keeps what was applied).
	started bool
	// leaving says the engine was removed from the fleet: it takes no new placement, and its
	// actor stops once its reservations are back (or drainBy passes).
	leaving bool
	drainBy time.Time
	// drained is set by the pool (its writer) once the leaving engine's reservations are back;
	// actorName is the actor's name under the pool (the engine's, or with a suffix while an
	// earlier engine of the name drains).
	drained   bool
	actorName string
	// peer is the cluster bookkeeping (peers.go); zero without a cluster.
	peer peerState

	timers engineTimers
}

type engineTimers struct {
	quarantine *time.Timer
	probe      *time.Timer
	discovery  *time.Timer
	drain      *time.Timer
}

func (t *engineTimers) stop() {
	for _, tm := range []*time.Timer{t.quarantine, t.probe, t.discovery, t.drain} {
		if tm != nil {
			tm.Stop()
		}
	}
}

// engineActor owns one engine's breaker and probes, and decides whether it may be placed. Every
// change to them happens in Receive, one message at a time.
type engineActor struct {
	r  *Router
	st *engineState
}

// Timer, probe and pool messages, private to the engine actors and their pool.
type (
	quarantineOver struct{}
	probeDue       struct{}
	probeFinished  struct {
		gen     int
		outcome probeOutcome
	}
	joinFinished struct {
		gen     int
		outcome probeOutcome
	}
	modelsFound struct {
		models []string
		err    error
	}
	discoverAgain struct{}
	// partnerReady tells a joining engine whose check waits for a partner that an engine it
	// could check with changed (the pool sends it when an engine is admitted or leaves
	// joining): the check is tried again now rather than at the next probe interval.
	partnerReady struct{}
	// joinWaiting tells the pool that engine's join check ended waiting for a partner, having
	// seen changes partner changes (poolState.partnerChanges): it is nudged by the next one.
	joinWaiting struct {
		engine  *actor.PID
		changes uint64
	}
	// retire tells an engine it left the fleet; drainBy bounds the wait for its requests.
	retire     struct{ drainBy time.Time }
	drainCheck struct{}
	// reconfigure carries recovery settings changed by a reload.
	reconfigure struct{ recovery config.RecoveryRuntime }
	// setSource says another source now reports the engine (same spec).
	setSource struct{ source string }
)

// drainPoll is how often a leaving engine checks whether its last request has ended.
const drainPoll = 20 * time.Millisecond

func (a *engineActor) Receive(ctx actor.Context) {
	st := a.st
	switch m := ctx.Message().(type) {
	case *actor.Started:
		if !st.started {
			st.started = true
			a.adopt(ctx)
		}
		a.publish(ctx, false)
		switch {
		case st.leaving:
			a.checkDrained(ctx)
			return
		case st.breaker.State() == health.Joining:
			st.checking = false // a restart lost the check in flight: start another
			a.join(ctx)
		case st.view.Models.Load() == nil && st.breaker.State() == health.Admitted:
			a.discoverModels(ctx)
		}
		a.schedule(ctx)
		a.r.metrics.EngineState(st.spec.Name, st.breaker.State().String(), health.StateNames[:])
	case *actor.Restarting:
		st.restarts++
		st.timers.stop()
	case *actor.Stopping:
		st.timers.stop()

	case *messages.LegOutcome:
		if !st.leaving { // a leaving engine's last streams say nothing about the name's next engine
			a.legOutcome(ctx, m)
		}

	case quarantineOver:
		if st.breaker.QuarantineOver(time.Now()) {
			a.transition(ctx, health.Quarantined)
		}
	case probeDue, *messages.ProbeNow:
		switch {
		case st.leaving:
		case st.breaker.State() == health.Joining:
			a.join(ctx)
		case a.probesHere():
			a.startProbe(ctx)
		case st.breaker.State() == health.Ejected: // a peer probes it this interval
			st.breaker.ProbeAt(time.Now().Add(st.breaker.ProbeInterval()))
			a.schedule(ctx)
		}
	case partnerReady:
		if st.breaker.State() == health.Joining && !st.leaving {
			a.join(ctx)
		}
	case *peerVerdict:
		if !st.leaving {
			a.applyPeer(ctx, m.v)
		}
	case probeFinished:
		a.probeFinished(ctx, m)
	case joinFinished:
		a.joinFinished(ctx, m)
	case modelsFound:
		if st.leaving {
			return
		}
		if m.err != nil {
			a.r.log.Warn("engine model discovery failed; retrying", "engine", st.spec.Name, "error", m.err.Error())
			self, root := ctx.Self(), a.r.root
			st.timers.discovery = time.AfterFunc(a.r.current().Recovery.ProbeIntervalS.Duration(),
				func() { root.Send(self, discoverAgain{}) })
			return
		}
		ms := m.models
		st.view.Models.Store(&ms)
		a.r.metrics.ServeModels(ms)
		a.publish(ctx, true)
	case discoverAgain:
		if !st.leaving {
			a.discoverModels(ctx)
		}

	case *messages.Eject:
		a.eject(ctx, m)
	case descriptorsRejected:
		a.onDescriptorsRejected(ctx, m)
	case *messages.Readmit:
		a.readmit(ctx, m)
	case *messages.Describe:
		ctx.Respond(a.snapshot())

	case retire:
		a.leave(ctx, m)
	case drainCheck:
		a.checkDrained(ctx)
	case reconfigure:
		st.breaker.Reconfigure(m.recovery)
		st.view.TakesOut.Store(st.breaker.TakesOut())
	case setSource:
		st.source = m.source
	}
}

// legOutcome feeds the breaker what a request supervisor decided a leg's end means
// (blame.go, breakerNews): a failure counts, a success resets the streak. Nothing is
// re-decided here.
func (a *engineActor) legOutcome(ctx actor.Context, m *messages.LegOutcome) {
	st := a.st
	prev := st.breaker.State()
	if m.Failed {
		st.breaker.Note(m.Note)
		st.breaker.Failure(time.Now(), m.Partner)
	} else {
		st.breaker.Success()
	}
	st.view.Streak.Store(int32(st.breaker.Streak()))
	st.view.TakesOut.Store(st.breaker.TakesOut())
	if st.breaker.State() != prev {
		a.transition(ctx, prev)
		a.schedule(ctx)
	}
}

// transition publishes a breaker state change and counts it. An ejection's log line says who
// ejected the engine and why.
func (a *engineActor) transition(ctx actor.Context, from health.State) {
	b := &a.st.breaker
	to := b.State()
	if to == from {
		return
	}
	a.r.metrics.BreakerTransition(a.st.spec.Name, from.String(), to.String())
	a.r.metrics.EngineState(a.st.spec.Name, to.String(), health.StateNames[:])
	attrs := []any{"engine", a.st.spec.Name, "from", from.String(), "to", to.String(), "streak", b.Streak()}
	if to == health.Ejected && (from != health.Probing || b.ByAdmin()) {
		attrs = append(attrs, "by", b.EjectedBy(), "reason", b.Cause())
	}
	a.r.log.Info("engine breaker", attrs...)
	a.publish(ctx, true)
	a.share(from)
	if to == health.Admitted && a.st.view.Models.Load() == nil {
		a.discoverModels(ctx) // admitted on a peer's word before its model list was known
	}
}

// publish updates the view placement reads and tells the pool when waiting requests may now
// find room here.
func (a *engineActor) publish(ctx actor.Context, notify bool) {
	st := a.st
	st.view.Placeable.Store(st.breaker.Placeable() && !st.leaving)
	st.view.State.Store(uint32(st.breaker.State()))
	st.view.Streak.Store(int32(st.breaker.Streak()))
	st.view.TakesOut.Store(st.breaker.TakesOut())
	st.view.Why.Store(a.whyOut())
	if notify && ctx.Parent() != nil {
		ctx.Send(ctx.Parent(), &messages.EngineChanged{Engine: st.spec.Name, Incarnation: st.incarnation,
			State: st.breaker.State().String(), Placeable: st.view.Placeable.Load(), HasRoom: st.view.HasRoom(),
			ByAdmin: st.breaker.ByAdmin(), Cause: st.breaker.Cause()})
	}
}

// whyOut is why the engine is not admitted (nil when it is): what ejected it, else its newest
// join check's or probe's outcome, else its state alone.
func (a *engineActor) whyOut() *string {
	st := a.st
	if st.view.Placeable.Load() {
		return nil
	}
	var why string
	switch p := st.joinCheck; {
	case st.breaker.Cause() != "":
		why = st.breaker.Cause()
	case st.breaker.State() == health.Joining && p != nil:
		why = "join check " + p.Result
		if p.Reason != "" {
			why += ": " + p.Reason
		}
	case st.lastProbe != nil:
		why = "last probe " + st.lastProbe.Result
		if st.lastProbe.Reason != "" {
			why += ": " + st.lastProbe.Reason
		}
	case st.breaker.State() == health.Joining:
		why = "its join check has not ended yet"
	default:
		return nil
	}
	return &why
}

// schedule arms the timer the current state needs.
func (a *engineActor) schedule(ctx actor.Context) {
	st := a.st
	if st.leaving {
		return
	}
	self, root := ctx.Self(), a.r.root
	switch st.breaker.State() {
	case health.Quarantined:
		if st.timers.quarantine != nil {
			st.timers.quarantine.Stop()
		}
		st.timers.quarantine = time.AfterFunc(time.Until(st.breaker.QuarantineEnds()), func() { root.Send(self, quarantineOver{}) })
	case health.Ejected:
		if st.timers.probe != nil {
			st.timers.probe.Stop()
		}
		if st.breaker.ByAdmin() {
			return // only an operator readmits it
		}
		st.timers.probe = time.AfterFunc(time.Until(st.breaker.NextProbe()), func() { root.Send(self, probeDue{}) })
	}
}

func (a *engineActor) eject(ctx actor.Context, m *messages.Eject) {
	st := a.st
	prev := st.breaker.State()
	st.probeGen++ // a probe or join check in flight must not admit the engine behind the operator's back
	st.checking = false
	st.breaker.EjectByAdmin(time.Now(), m.Reason)
	if prev == st.breaker.State() { // ejected before, by its failures: now the operator's
		a.r.log.Info("engine breaker", "engine", st.spec.Name, "from", prev.String(), "to", st.breaker.State().String(),
			"by", "admin", "reason", m.Reason)
		a.publish(ctx, true)
		a.share(prev) // no transition, but the operator's word is news to the peers
	}
	a.transition(ctx, prev)
	a.schedule(ctx)
	ctx.Respond(&messages.AdminDone{State: st.breaker.State().String()})
}

func (a *engineActor) readmit(ctx actor.Context, m *messages.Readmit) {
	st := a.st
	prev := st.breaker.State()
	st.peer.operator = true // what changes here is the operator's word, for the peers too
	defer func() { st.peer.operator = false }()
	switch {
	case m.Force || (prev == health.Ejected && st.breaker.ByAdmin()):
		// An operator's ejection ends with the operator's word; a forced readmission skips the
		// probe (or join check) an ejection by failures (or a new engine) would need.
		st.probeGen++ // any probe in flight is now stale
		st.checking = false
		st.breaker.ProbeSucceeded()
		a.r.log.Info("engine readmitted by admin", "engine", st.spec.Name, "from", prev.String(), "force", m.Force)
		a.transition(ctx, prev)
	case prev == health.Quarantined:
		st.breaker.LiftQuarantine()
		a.transition(ctx, prev)
	case prev == health.Ejected:
		a.startProbe(ctx)
	case prev == health.Joining:
		a.join(ctx)
	}
	ctx.Respond(&messages.AdminDone{State: st.breaker.State().String()})
}

// leave takes the engine out of the fleet: no placement from now on (removed is what reserve
// re-checks), nothing in flight of the breaker's matters, and the actor waits for the engine's
// reservations to come back before its pool stops it.
func (a *engineActor) leave(ctx actor.Context, m retire) {
	st := a.st
	if st.leaving {
		return
	}
	st.leaving, st.drainBy = true, m.drainBy
	st.view.Removed.Store(true)
	st.probeGen++
	st.checking = false
	st.timers.stop()
	a.publish(ctx, false)
	p, d := st.view.Reserved()
	a.r.log.Info("engine leaving the fleet", "engine", st.spec.Name, "source", st.source,
		"reservations", p+d, "drain_by", m.drainBy.UTC().Format(time.RFC3339Nano))
	a.checkDrained(ctx)
}

// checkDrained tells the pool once the leaving engine holds no reservation (or its drain bound
// passed: a request still holding one has outlived its deadline), and looks again otherwise.
func (a *engineActor) checkDrained(ctx actor.Context) {
	st := a.st
	if st.view.Load() == 0 || !time.Now().Before(st.drainBy) {
		if l := st.view.Load(); l > 0 {
			a.r.log.Warn("engine left the fleet with reservations still held past its drain bound", "engine", st.spec.Name, "reservations", l)
		}
		ctx.Send(ctx.Parent(), &engineDrained{st: st})
		return
	}
	self, root := ctx.Self(), a.r.root
	st.timers.drain = time.AfterFunc(drainPoll, func() { root.Send(self, drainCheck{}) })
}

// discoverModels asks an admitted engine which models it serves, when neither the
// configuration nor its join check said (it was admitted on a peer's word). Until it answers,
// the engine is not placed; failures retry at the probe interval.
func (a *engineActor) discoverModels(ctx actor.Context) {
	self, root, client := ctx.Self(), a.r.root, a.st.view.Client
	timeout := a.r.rt.Engine.ModelsTimeoutS.Duration()
	go func() {
		c, cancel := context.WithTimeout(context.Background(), timeout)
		defer cancel()
		ids, err := listModels(c, client)
		root.Send(self, modelsFound{models: ids, err: err})
	}()
}

var errNoModels = errors.New("engine lists no model")

func (a *engineActor) snapshot() *messages.EngineState {
	st := a.st
	b := &st.breaker
	s := &messages.EngineState{
		Name: st.spec.Name, Role: string(st.spec.Role), State: b.State().String(), Streak: b.Streak(),
		Source:      st.source,
		Reserved:    reservedSlots(st.view),
		MaxInflight: st.spec.MaxInflight, LastProbe: st.lastProbe, JoinCheck: st.joinCheck, Restarts: st.restarts,
		Readmission: a.r.current().Recovery.Readmission, EjectedBy: b.EjectedBy(),
		DecidedBy: st.peer.by, PeerReason: st.peer.reason,
	}
	if st.leaving {
		s.State = stateRemoving
	}
	if s.EjectedBy != "" {
		s.EjectReason = b.Cause()
	}
	s.Load = a.r.loadState(st.view)
	if p := st.view.Models.Load(); p != nil {
		s.Models = *p
	}
	if !b.QuarantineEnds().IsZero() {
		t := b.QuarantineEnds()
		s.QuarantineEnds = &t
	}
	if !b.EjectedAt().IsZero() {
		t := b.EjectedAt()
		s.EjectedAt = &t
	}
	if !b.NextProbe().IsZero() && !b.ByAdmin() && (b.State() == health.Ejected || b.State() == health.Probing) {
		t := b.NextProbe()
		s.NextProbe = &t
	}
	return s
}

// stateRemoving is the state /engines shows for an engine that left the fleet while its last
// requests finish.
const stateRemoving = "removing"

func reservedSlots(v *placement.Engine) messages.PhaseSlots {
	p, d := v.Reserved()
	return messages.PhaseSlots{Prefill: p, Decode: d}
}
