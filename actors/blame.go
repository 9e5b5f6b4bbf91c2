package actors

import (
	"github.com/asynkron/protoactor-go/actor"

	"github.com/narwhal-router/narwhal/actors/health"
	"github.com/narwhal-router/narwhal/actors/placement"
	"github.com/narwhal-router/narwhal/messages"
)

// What a request tells the breakers. Every leg that held a slot ends once (release); how it
// ended is a legEnd. Before the request commits, its leg ends wait for the request's fate
// (judge); the failures then go to the blame board, which compares them with other requests'
// before it counts any (blameboard.go, health.Board). After the commit a leg's end is told at
// once. Either way breakerNews (health.Leg.News) alone turns a leg's end into what the engine
// actor is told, and the engine actor applies it as it is.

// legEnd is how one leg of the request ended on its engine.
type legEnd = health.Leg[*placement.Engine]

// blameReport is a request's counted failures, sent to the blame board once its fate is known
// (judge).
type blameReport = health.Report[*placement.Engine]

// breakerNews is what l tells its engine's breaker (health.Leg.News), requestsFault saying the
// board found the failure to be the request's own or its producer's. The engine's streak and
// the cluster's fence are read only when they decide.
func (env *requestEnv) breakerNews(l legEnd, requestsFault bool) (m messages.LegOutcome, ok bool) {
	streaking := !l.Neutral && l.Fault == nil && l.Engine.Streak.Load() != 0
	fenced := l.Counted() && !requestsFault && env.cluster.Fenced()
	return l.News(streaking, requestsFault, fenced)
}

// legEnded takes a leg's end: judged at once after the commit; before it, held for judge unless
// it says nothing whatever the request's fate.
func (s *requestSupervisor) legEnded(ctx actor.Context, l legEnd) {
	if s.stage == stageStreaming {
		s.tell(ctx, l, false)
		return
	}
	if _, news := s.env.breakerNews(l, false); news {
		s.ended = append(s.ended, l)
	}
}

// tell sends the engine's breaker what breakerNews decides of l; sender is the supervisor's
// context or, after a crash, the router's root.
func (s *requestSupervisor) tell(sender actor.SenderContext, l legEnd, requestsFault bool) {
	if m, ok := s.env.breakerNews(l, requestsFault); ok {
		news := m // only news escapes to the heap: the common case (nothing to tell) allocates nothing
		sender.Send(pidOf(l.Engine), &news)
	}
}

// judge hands, once the request's fate is known, its held leg ends to whoever decides what they
// blame: a success goes to its engine's breaker at once (it resets a streak); the counted
// failures go to the blame board (blameboard.go) in one report, with the request's fingerprint
// and, when it committed, the pair it committed on. The board compares them with the failures
// and commits of other requests before anything is counted.
func (s *requestSupervisor) judge(ctx actor.Context, committed bool) {
	ends := s.ended
	if len(ends) == 0 {
		return
	}
	s.ended = nil
	var r *blameReport
	for _, l := range ends {
		if !l.Counted() {
			s.tell(ctx, l, false)
			continue
		}
		if r == nil {
			r = &blameReport{FP: s.fingerprint, Committed: committed}
			if committed {
				r.Producer, r.Consumer = s.producer, s.consumer
			}
		}
		r.Ends = append(r.Ends, l)
	}
	if r != nil {
		ctx.Send(s.env.board, r)
	}
}
