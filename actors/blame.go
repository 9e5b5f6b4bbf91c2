package actors

import (
	"sync/atomic"

	"github.com/asynkron/protoactor-go/actor"

	"github.com/narwhal-router/narwhal/messages"
	"github.com/narwhal-router/narwhal/transport/fault"
)

// What a request tells the breakers. Every leg that held a slot ends once (release); how it
// ended is a legEnd. Before the request commits, its leg ends wait for the request's fate:
// whether a failure was the engine's or the request's can only be told then (judge). After the
// commit a leg's end is judged at once. Either way breakerNews alone turns a leg's end into what
// the engine actor is told, and the engine actor applies it as it is.

// legEnd is how one leg of the request ended on its engine.
type legEnd struct {
	engine *engineView
	phase  fault.Phase
	// fault is nil when the leg succeeded.
	fault *fault.Fault
	// neutral says the leg's end says nothing about the engine: the request was cancelled on
	// our side, or the slot was given back unused.
	neutral bool
	// partner names the attempt's other engine ("" for a local decode or a same-worker one).
	partner string
}

// counted says the leg failed in a way its engine's breaker counts (the fault table's Counts).
func (l legEnd) counted() bool {
	return !l.neutral && l.fault != nil && l.fault.CountsAgainstEngine()
}

// breakerNews is the one place that decides what a leg's end tells its engine's breaker: a
// failure to count, a success that resets the streak, or nothing (ok false). requestsFault says the
// request's fate showed the failure to be the request's own (judge). Nothing is said for a
// neutral end, a fault the table does not count, a success while the engine has no streak to
// reset, or a failure right after this node stalled (every leg in flight timed out at once: the
// node's trouble, not the engine's).
func (env *requestEnv) breakerNews(l legEnd, requestsFault bool) (m messages.LegOutcome, ok bool) {
	switch {
	case l.neutral:
		return m, false
	case l.fault == nil:
		return messages.LegOutcome{Partner: l.partner}, l.engine.streak.Load() != 0
	case !l.fault.CountsAgainstEngine(), requestsFault, env.cluster.Fenced():
		return m, false
	}
	note := l.fault.Kind.String() + " on the " + l.phase.String() + " leg"
	if l.partner != "" {
		note += " (partner " + l.partner + ")"
	}
	return messages.LegOutcome{Failed: true, Note: note, Partner: l.partner}, true
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
		sender.Send(l.engine.pid, &news)
	}
}

// judge decides, once the request's fate is known, whom its held leg ends blame, and tells the
// breakers. A failure that follows the request rather than the engine — a prompt that makes
// every engine hang or fail — must not eject a healthy fleet, so:
//
//   - if the request went on to commit on some engine, every earlier failure was its engine's:
//     each is counted;
//   - if it never committed and failed the same way (leg, fault kind, status) on two or more
//     engines, those failures are the request's: none extends a streak, each is counted in
//     request_attributed_failures;
//   - everything else (a single failure, failures of different kinds) is counted as before.
//
// Attribution also needs evidence that the fleet serves other requests: some request committed
// since failures were last attributed (blameLedger). A fleet where every engine fails every
// request looks like a stream of poison requests; without that evidence its failures are
// counted, so it is still ejected (and the whole-wave policy applies).
func (s *requestSupervisor) judge(ctx actor.Context, committed bool) {
	ends := s.ended
	if len(ends) == 0 {
		return
	}
	s.ended = nil
	var blamed []bool
	if !committed {
		blamed = s.attribute(ends)
	}
	for i, l := range ends {
		requests := blamed != nil && blamed[i]
		if requests {
			s.env.metrics.RequestAttributedFailure(l.phase.String(), l.fault.Kind.String())
			s.env.log.Debug("failure attributed to the request", "request_id", s.x.ID, "engine", l.engine.name,
				"leg", l.phase.String(), "kind", l.fault.Kind.String())
		}
		s.tell(ctx, l, requests)
	}
}

// attribute marks the counted failures of a request that never committed which are the
// request's own (judge's rules), or returns nil when none is.
func (s *requestSupervisor) attribute(ends []legEnd) []bool {
	var blamed []bool
	for i := range ends {
		for j := range ends {
			if ends[i].counted() && ends[j].counted() && sameWay(ends[i], ends[j]) {
				if blamed == nil {
					blamed = make([]bool, len(ends))
				}
				blamed[i] = true
			}
		}
	}
	if blamed != nil && !s.env.blame.claim() {
		return nil // no request committed since the last attribution: the fleet may be failing
	}
	return blamed
}

// sameWay says two failures of one request on different engines look alike: the same leg, the
// same fault kind and the same engine status.
func sameWay(a, b legEnd) bool {
	return a.engine != b.engine && a.phase == b.phase && a.fault.Kind == b.fault.Kind && a.fault.Status == b.fault.Status
}

// blameLedger is the router-wide evidence attribution reads: commits counts committed requests,
// attributedAt is its value when failures were last attributed to a request.
type blameLedger struct {
	commits, attributedAt atomic.Uint64
}

func (b *blameLedger) committed() { b.commits.Add(1) }

// claim reports whether some request committed since failures were last attributed, and if so
// spends that evidence on this attribution.
func (b *blameLedger) claim() bool {
	if c := b.commits.Load(); c > b.attributedAt.Load() {
		b.attributedAt.Store(c)
		return true
	}
	return false
}
