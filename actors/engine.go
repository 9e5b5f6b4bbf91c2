package actors

import (
	"context"
	"errors"
	"time"

	"github.com/asynkron/protoactor-go/actor"

	"github.com/narwhal-router/narwhal/config"
	"github.com/narwhal-router/narwhal/messages"
)

// engineState is everything one engine actor owns. It lives outside the actor value so that a
// restarted actor (after a panic) carries on with the same breaker; the reservations live in
// the view, where supervisors take them.
type engineState struct {
	spec    config.EngineSpec
	view    *engineView
	breaker breaker
	// lastProbe is the outcome of the newest probe.
	lastProbe *messages.Probe
	restarts  int
	// probeGen identifies the probe in flight; an outcome for another generation is stale.
	probeGen int
	// peer is the cluster bookkeeping (peers.go); zero without a cluster.
	peer peerState

	timers engineTimers
}

type engineTimers struct {
	quarantine *time.Timer
	probe      *time.Timer
	discovery  *time.Timer
}

func (t *engineTimers) stop() {
	for _, tm := range []*time.Timer{t.quarantine, t.probe, t.discovery} {
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

// Timer and probe messages, private to the engine actor.
type (
	quarantineOver struct{}
	probeDue       struct{}
	probeFinished  struct {
		gen     int
		outcome messages.Probe
	}
	modelsFound struct {
		models []string
		err    error
	}
)

func (a *engineActor) Receive(ctx actor.Context) {
	st := a.st
	switch m := ctx.Message().(type) {
	case *actor.Started:
		if len(st.spec.Models) == 0 && st.view.models.Load() == nil {
			a.discoverModels(ctx)
		}
		a.publish(ctx, false)
		a.schedule(ctx)
		a.r.metrics.EngineState(st.spec.Name, st.breaker.state.String(), breakerStateNames[:])
	case *actor.Restarting:
		st.restarts++
		st.timers.stop()
	case *actor.Stopping:
		st.timers.stop()

	case *messages.LegOutcome:
		a.legOutcome(ctx, m)

	case quarantineOver:
		if st.breaker.quarantineOver(time.Now()) {
			a.transition(ctx, quarantined)
		}
	case probeDue, *messages.ProbeNow:
		if a.probesHere() {
			a.startProbe(ctx)
		} else if st.breaker.state == ejected { // a peer probes it this interval
			st.breaker.nextProbe = time.Now().Add(st.breaker.probeInterval)
			a.schedule(ctx)
		}
	case *peerVerdict:
		a.applyPeer(ctx, m.v)
	case probeFinished:
		a.probeFinished(ctx, m)
	case modelsFound:
		if m.err != nil {
			a.r.log.Warn("engine model discovery failed; retrying", "engine", st.spec.Name, "error", m.err.Error())
			self, root := ctx.Self(), a.r.root
			st.timers.discovery = time.AfterFunc(a.r.rt.Recovery.ProbeInterval,
				func() { root.Send(self, discoverAgain{}) })
			return
		}
		ms := m.models
		st.view.models.Store(&ms)
		a.r.metrics.ServeModels(ms)
		a.publish(ctx, true)
	case discoverAgain:
		a.discoverModels(ctx)

	case *messages.Eject:
		prev := st.breaker.state
		st.probeGen++ // a probe in flight must not readmit the engine behind the operator's back
		st.breaker.ejectByAdmin(time.Now(), m.Reason)
		if prev == st.breaker.state { // ejected before, by its failures: now the operator's
			a.r.log.Info("engine breaker", "engine", st.spec.Name, "from", prev.String(), "to", st.breaker.state.String(),
				"by", "admin", "reason", m.Reason)
			a.publish(ctx, true)
			a.share(prev) // no transition, but the operator's word is news to the peers
		}
		a.transition(ctx, prev)
		a.schedule(ctx)
		ctx.Respond(&messages.AdminDone{State: st.breaker.state.String()})
	case *messages.Readmit:
		a.readmit(ctx, m)
	case *messages.Describe:
		ctx.Respond(a.snapshot())
	}
}

// legOutcome feeds the breaker what a request supervisor decided a leg's end means
// (blame.go, breakerNews): a failure counts, a success resets the streak. Nothing is
// re-decided here.
func (a *engineActor) legOutcome(ctx actor.Context, m *messages.LegOutcome) {
	st := a.st
	prev := st.breaker.state
	if m.Failed {
		st.breaker.note(m.Note)
		st.breaker.failure(time.Now(), m.Partner)
	} else {
		st.breaker.success()
	}
	st.view.streak.Store(int32(st.breaker.streak))
	st.view.takesOut.Store(st.breaker.takesOut())
	if st.breaker.state != prev {
		a.transition(ctx, prev)
		a.schedule(ctx)
	}
}

// transition publishes a breaker state change and counts it. An ejection's log line says who
// ejected the engine and why.
func (a *engineActor) transition(ctx actor.Context, from breakerState) {
	b := &a.st.breaker
	to := b.state
	if to == from {
		return
	}
	a.r.metrics.BreakerTransition(a.st.spec.Name, from.String(), to.String())
	a.r.metrics.EngineState(a.st.spec.Name, to.String(), breakerStateNames[:])
	attrs := []any{"engine", a.st.spec.Name, "from", from.String(), "to", to.String(), "streak", b.streak}
	if to == ejected && (from != probing || b.byAdmin) {
		attrs = append(attrs, "by", b.ejectedBy(), "reason", b.cause)
	}
	a.r.log.Info("engine breaker", attrs...)
	a.publish(ctx, true)
	a.share(from)
}

// publish updates the view placement reads and tells the pool when waiting requests may now
// find room here.
func (a *engineActor) publish(ctx actor.Context, notify bool) {
	st := a.st
	st.view.placeable.Store(st.breaker.placeable())
	st.view.streak.Store(int32(st.breaker.streak))
	st.view.takesOut.Store(st.breaker.takesOut())
	if notify && ctx.Parent() != nil {
		ctx.Send(ctx.Parent(), &messages.EngineChanged{Engine: st.spec.Name, State: st.breaker.state.String(),
			Placeable: st.breaker.placeable(), HasRoom: st.view.hasRoom(), ByAdmin: st.breaker.byAdmin, Cause: st.breaker.cause})
	}
}

// schedule arms the timer the current state needs.
func (a *engineActor) schedule(ctx actor.Context) {
	st := a.st
	self, root := ctx.Self(), a.r.root
	switch st.breaker.state {
	case quarantined:
		if st.timers.quarantine != nil {
			st.timers.quarantine.Stop()
		}
		st.timers.quarantine = time.AfterFunc(time.Until(st.breaker.quarantineEnds), func() { root.Send(self, quarantineOver{}) })
	case ejected:
		if st.timers.probe != nil {
			st.timers.probe.Stop()
		}
		if st.breaker.byAdmin {
			return // only an operator readmits it
		}
		st.timers.probe = time.AfterFunc(time.Until(st.breaker.nextProbe), func() { root.Send(self, probeDue{}) })
	}
}

func (a *engineActor) readmit(ctx actor.Context, m *messages.Readmit) {
	st := a.st
	prev := st.breaker.state
	st.peer.operator = true // what changes here is the operator's word, for the peers too
	defer func() { st.peer.operator = false }()
	switch {
	case m.Force || (prev == ejected && st.breaker.byAdmin):
		// An operator's ejection ends with the operator's word; a forced readmission skips the
		// probe an ejection by failures would need.
		st.probeGen++ // any probe in flight is now stale
		st.breaker.probeSucceeded()
		a.r.log.Info("engine readmitted by admin", "engine", st.spec.Name, "from", prev.String(), "force", m.Force)
		a.transition(ctx, prev)
	case prev == quarantined:
		st.breaker.quarantineEnds = time.Now()
		st.breaker.quarantineOver(time.Now())
		a.transition(ctx, prev)
	case prev == ejected:
		a.startProbe(ctx)
	}
	ctx.Respond(&messages.AdminDone{State: st.breaker.state.String()})
}

type discoverAgain struct{}

// discoverModels asks the engine which models it serves, when the configuration does not say.
// Until it answers, the engine is not placed; failures retry at the probe interval.
func (a *engineActor) discoverModels(ctx actor.Context) {
	self, root, client := ctx.Self(), a.r.root, a.st.view.client
	timeout := a.r.rt.Engine.FirstToken
	go func() {
		c, cancel := context.WithTimeout(context.Background(), timeout)
		defer cancel()
		info, err := client.Models(c)
		if err == nil && len(info) == 0 {
			err = errNoModels
		}
		ids := make([]string, len(info))
		for i, m := range info {
			ids[i] = m.ID
		}
		root.Send(self, modelsFound{models: ids, err: err})
	}()
}

var errNoModels = errors.New("engine lists no model")

func (a *engineActor) snapshot() *messages.EngineState {
	st := a.st
	b := &st.breaker
	s := &messages.EngineState{
		Name: st.spec.Name, Role: string(st.spec.Role), State: b.state.String(), Streak: b.streak,
		Reserved:    reservedSlots(st.view),
		MaxInflight: st.spec.MaxInflight, LastProbe: st.lastProbe, Restarts: st.restarts,
		Readmission: a.r.rt.Recovery.Readmission, EjectedBy: b.ejectedBy(),
		DecidedBy: st.peer.by, PeerReason: st.peer.reason,
	}
	if s.EjectedBy != "" {
		s.EjectReason = b.cause
	}
	s.Load = a.r.loadState(st.view)
	if p := st.view.models.Load(); p != nil {
		s.Models = *p
	}
	if !b.quarantineEnds.IsZero() {
		t := b.quarantineEnds
		s.QuarantineEnds = &t
	}
	if !b.ejectedAt.IsZero() {
		t := b.ejectedAt
		s.EjectedAt = &t
	}
	if !b.nextProbe.IsZero() && !b.byAdmin && (b.state == ejected || b.state == probing) {
		t := b.nextProbe
		s.NextProbe = &t
	}
	return s
}

func reservedSlots(v *engineView) messages.PhaseSlots {
	p, d := v.reserved()
	return messages.PhaseSlots{Prefill: p, Decode: d}
}
