package actors

import (
	"time"

	"github.com/asynkron/protoactor-go/actor"

	"github.com/narwhal-router/narwhal/messages"
)

// poolActor is the parent of the engine actors and the admission queue: requests that found no
// engine with room wait here, in arrival order, until an engine frees a slot.
type poolActor struct {
	r       *Router
	states  []*engineState
	waiters []waiter
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
		for _, st := range p.states {
			st := st
			props := actor.PropsFromProducer(func() actor.Actor { return &engineActor{r: p.r, st: st} })
			pid, err := ctx.SpawnNamed(props, st.cfg.Name)
			if err != nil {
				panic(err) // names are unique by validation; a clash is a programming error
			}
			st.view.pid = pid
		}
	case *awaitReady:
		ctx.Respond(true)
	case *messages.AwaitCapacity:
		if len(p.waiters) >= p.r.cfg.Admission.MaxQueue {
			ctx.Respond(&messages.QueueFull{})
			return
		}
		w := waiter{pid: ctx.Sender(), model: m.Model}
		if m.Front {
			p.waiters = append([]waiter{w}, p.waiters...)
		} else {
			p.waiters = append(p.waiters, w)
		}
		p.r.metrics.QueueDepth(len(p.waiters))
	case *messages.StopWaiting:
		for i, w := range p.waiters {
			if w.pid.Equal(ctx.Sender()) {
				p.waiters = append(p.waiters[:i], p.waiters[i+1:]...)
				break
			}
		}
		p.r.metrics.QueueDepth(len(p.waiters))
	case *messages.EngineChanged:
		if m.Placeable && m.HasRoom {
			p.wake(ctx, p.r.fleet.engine(m.Engine))
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
		room = v.maxInflight - int(v.load.Load())
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
	p.r.metrics.QueueDepth(len(p.waiters))
}
