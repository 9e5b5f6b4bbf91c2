package actors

import (
	"github.com/asynkron/protoactor-go/actor"
)

// guardianActor is the root of Narwhal's supervisor tree: it starts the engine pool and restarts
// it if it crashes. Request supervisors are spawned beside it (see Router.Dispatch).
type guardianActor struct {
	r *Router
}

func (g *guardianActor) Receive(ctx actor.Context) {
	switch ctx.Message().(type) {
	case *actor.Started:
		props := actor.PropsFromProducer(func() actor.Actor { return &poolActor{r: g.r, poolState: g.r.pooled} },
			actor.WithSupervisor(engineSupervision), inline)
		pid, err := ctx.SpawnNamed(props, "engines")
		if err != nil {
			panic(err)
		}
		g.r.pool, g.r.env.pool = pid, pid
		board, err := ctx.SpawnNamed(actor.PropsFromProducer(func() actor.Actor { return &blameBoard{env: g.r.env, r: g.r} }, inline), "blame")
		if err != nil {
			panic(err)
		}
		g.r.env.board = board
	case *awaitReady:
		ctx.Forward(g.r.pool)
	}
}
