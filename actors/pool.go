package actors

import (
	"time"

	"github.com/asynkron/protoactor-go/actor"

	"github.com/narwhal-router/narwhal/messages"
	"github.com/narwhal-router/narwhal/transport/fault"
)

// poolActor is the parent of the engine actors and the admission queue: requests that found no
// engine with room wait here, in arrival order, until an engine frees a slot.
type poolActor struct {
	r       *Router
	states  []*engineState
	waiters []waiter
	// breaker is each engine's last reported breaker state; inWave marks a role whose engines
	// were all ejected and restarted together, until one of them is admitted again.
	breaker map[string]string
	inWave  [2]bool
	// byAdmin marks engines an operator ejected; cause is what ejected each engine.
	byAdmin map[string]bool
	cause   map[string]string
}

type waiter struct {
	pid   *actor.PID
	model string
}

// awaitReady is answered once the pool's engine actors exist.
type awaitReady struct{}

// engineSupervision restarts a crashed engine actor; its state lives outside the actor value,
// so the breaker and the reservations survive the restart.
var engineSupervision = actor.NewOneForOneStrategy(100, time.Minute, func(any) actor.Directive {
	return actor.RestartDirective
})

func (p *poolActor) Receive(ctx actor.Context) {
	switch m := ctx.Message().(type) {
	case *actor.Started:
		p.breaker, p.byAdmin, p.cause = map[string]string{}, map[string]bool{}, map[string]string{}
		for _, st := range p.states {
			st := st
			props := actor.PropsFromProducer(func() actor.Actor { return &engineActor{r: p.r, st: st} }, inline)
			pid, err := ctx.SpawnNamed(props, st.spec.Name)
			if err != nil {
				panic(err) // names are unique by validation; a clash is a programming error
			}
			st.view.pid = pid
		}
	case *awaitReady:
		ctx.Respond(true)
	case *messages.AwaitCapacity:
		if len(p.waiters) >= p.r.rt.Request.MaxQueue {
			ctx.Respond(&messages.QueueFull{})
			return
		}
		w := waiter{pid: ctx.Sender(), model: m.Model}
		if m.Front {
			p.waiters = append([]waiter{w}, p.waiters...)
		} else {
			p.waiters = append(p.waiters, w)
		}
		p.depthChanged()
	case *messages.StopWaiting:
		for i, w := range p.waiters {
			if w.pid.Equal(ctx.Sender()) {
				p.waiters = append(p.waiters[:i], p.waiters[i+1:]...)
				break
			}
		}
		p.depthChanged()
	case *messages.CapacityFreed:
		if v := p.r.fleet.engine(m.Engine); v != nil && v.placeable.Load() {
			p.wake(ctx, v)
		}
	case *messages.EngineChanged:
		p.breaker[m.Engine], p.byAdmin[m.Engine], p.cause[m.Engine] = m.State, m.ByAdmin, m.Cause
		if m.Placeable && m.HasRoom {
			p.wake(ctx, p.r.fleet.engine(m.Engine))
		}
		p.checkWaves(ctx)
	}
}

// checkWaves applies the whole-wave policy: when every engine able to run a phase is ejected
// at once, the fault is fleet-wide (a bad deploy, a network partition), so the engine actors of
// that wave are restarted together and all probed at once instead of one by one on their
// backed-off cadences. Requests meanwhile get fast 503s (no admitted engine) rather than
// queueing. Probes still decide readmission, engine by engine. Engines an operator ejected are
// not part of a wave: they stay out until the operator readmits them, and a role ejected
// entirely by its operator is maintenance, not a fault.
func (p *poolActor) checkWaves(ctx actor.Context) {
	for _, phase := range []fault.Phase{fault.PhasePrefill, fault.PhaseDecode} {
		var wave []*actor.PID
		var names, causes []string
		all := true
		for _, v := range p.r.fleet.engines {
			if !v.canServe(phase) {
				continue
			}
			if s := p.breaker[v.name]; s != ejected.String() && s != probing.String() {
				all = false
				break
			}
			if p.byAdmin[v.name] {
				continue
			}
			wave = append(wave, v.pid)
			names = append(names, v.name)
			causes = append(causes, v.name+": "+p.cause[v.name])
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

// wake tells the first waiters the engine can serve to try again: as many as it has room for.
func (p *poolActor) wake(ctx actor.Context, v *engineView) {
	if v == nil || len(p.waiters) == 0 {
		return
	}
	room := len(p.waiters)
	if v.maxInflight > 0 {
		room = v.maxInflight - v.load()
	}
	kept := p.waiters[:0]
	for _, w := range p.waiters {
		if room > 0 && v.serves(w.model) {
			ctx.Send(w.pid, &messages.CapacityAvailable{})
			room--
			continue
		}
		kept = append(kept, w)
	}
	p.waiters = kept
	p.depthChanged()
}

// depthChanged publishes the queue depth: a gauge, and the count supervisors read to decide
// whether a released slot is worth telling the pool about.
func (p *poolActor) depthChanged() {
	p.r.env.queued.Store(int32(len(p.waiters)))
	p.r.metrics.QueueDepth(len(p.waiters))
}
