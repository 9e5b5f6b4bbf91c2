package actors

import (
	"time"

	"github.com/asynkron/protoactor-go/actor"

	"github.com/narwhal-router/narwhal/actors/health"
	"github.com/narwhal-router/narwhal/actors/placement"
)

// blameBoard is the blame board's actor, beside the pool: it feeds health.Board (whose rules
// say whether each counted failure is its engine's, its request's or its producer's) one
// report per request that failed and applies what the board decides, in order. Commits reach
// the board through the engines' lock-free counters and the commit table (health.CommitTable,
// written by the supervisors at commit), not messages. While the board holds failures for
// evidence, the actor has it look again every boardTickEvery.
type blameBoard struct {
	env     *requestEnv
	r       *Router // the configuration a pair probe runs with (pairs.go)
	self    *actor.PID
	board   *health.Board[*placement.Engine]
	ticking bool
	// pairs are the pair breakers, whose one writer this actor is (pairs.go).
	pairs pairState
}

// boardTickEvery is how often the board looks for evidence while it holds failures.
const boardTickEvery = 50 * time.Millisecond

type boardDue struct{}

func (b *blameBoard) Receive(ctx actor.Context) {
	switch m := ctx.Message().(type) {
	case *actor.Started:
		b.self = ctx.Self()
		b.board = health.NewBoard[*placement.Engine](boardFacts{b.env})
		b.startPairs()
	case *blameReport:
		b.apply(ctx, b.board.Report(*m, time.Now(), b.window()))
	case boardDue:
		b.ticking = false
		b.apply(ctx, b.board.Evaluate(time.Now(), b.window()))
	default:
		b.receivePairs(m)
	}
}

func (b *blameBoard) window() time.Duration { return b.env.current().recovery.BlameWindow }

// apply carries out the board's decisions, and looks again in a while if it still holds some.
func (b *blameBoard) apply(ctx actor.Context, ds []health.Decision[*placement.Engine]) {
	for _, d := range ds {
		l := d.Leg
		switch d.Verdict {
		case health.Count:
			if m, ok := b.env.breakerNews(l, false); ok {
				ctx.Send(pidOf(l.Engine), &m)
			}
		case health.Attribute:
			b.env.metrics.RequestAttributedFailure(l.Phase.String(), l.Fault.Kind.String())
			b.env.log.Debug("failure attributed to the request", "engine", l.Engine.Name,
				"leg", l.Phase.String(), "kind", l.Fault.Kind.String())
		case health.Suspect:
			l.Producer.Suspect.Store(d.Until.UnixNano()) // the blame board is Suspect's one writer
		case health.BlameProducer:
			if m, ok := health.HandoffNews(l, l.Engine.Name, b.env.cluster.Fenced()); ok {
				ctx.Send(pidOf(l.Producer), &m)
			}
			b.env.log.Info("failed handoff blamed on the producer: its handoffs fail on two or more consumers",
				"producer", l.Producer.Name, "consumer", l.Engine.Name, "kind", l.Fault.Kind.String())
		case health.BlamePair:
			b.pairFailed(l.Producer, l.Engine, l.Fault.Error())
		}
	}
	if b.board.Holding() && !b.ticking {
		b.ticking = true
		self, root := b.self, b.env.root
		time.AfterFunc(boardTickEvery, func() { root.Send(self, boardDue{}) })
	}
}

// boardFacts are the counters the board reads (health.Facts): the engine records' commits and
// placeability, the fleet's latest commit, the commit table.
type boardFacts struct{ env *requestEnv }

func (f boardFacts) Commits(e *placement.Engine) uint64   { return e.Commits.Load() }
func (f boardFacts) LastCommit(e *placement.Engine) int64 { return e.LastCommit.Load() }
func (f boardFacts) InPlacement(e *placement.Engine) bool { return e.Placeable.Load() }

func (f boardFacts) OtherPartners(p, c *placement.Engine) bool {
	return f.env.fleet.Load().OtherPartners(p, c)
}

func (f boardFacts) CommittedAfter(fp uint64, after time.Time) bool {
	return f.env.commits.Since(fp, after)
}

func (f boardFacts) FleetCommittedAfter(cut int64) bool {
	for _, e := range f.env.fleet.Load().Engines {
		if e.LastCommit.Load() > cut {
			return true
		}
	}
	return false
}
