package actors

import (
	"sync/atomic"
	"time"

	"github.com/asynkron/protoactor-go/actor"

	"github.com/narwhal-router/narwhal/actors/placement"
	"github.com/narwhal-router/narwhal/messages"
	"github.com/narwhal-router/narwhal/transport/fault"
)

// What a request tells the breakers. Every leg that held a slot ends once (release); how it
// ended is a legEnd. Before the request commits, its leg ends wait for the request's fate
// (judge); the failures then go to the blame board, which compares them with other requests'
// before it counts any (blameboard.go). After the commit a leg's end is told at once. Either
// way breakerNews alone turns a leg's end into what the engine actor is told (handoffNews, a
// producer blamed for a consumer's failed read), and the engine actor applies it as it is.

// legEnd is how one leg of the request ended on its engine.
type legEnd struct {
	engine *placement.Engine
	phase  fault.Phase
	// fault is nil when the leg succeeded.
	fault *fault.Fault
	// neutral says the leg's end says nothing about the engine: the request was cancelled on
	// our side, or the slot was given back unused.
	neutral bool
	// partner names the attempt's other engine ("" for a local decode or a same-worker one);
	// producer is that engine for a decode leg (nil without one).
	partner  string
	producer *placement.Engine
}

// transfer says the leg is a decode that failed before its first token while reading a
// producer's handoff: a fault of the pair, until other failures show which side it is.
func (l legEnd) transfer() bool {
	return l.phase == fault.PhaseDecode && l.producer != nil && l.counted()
}

// counted says the leg failed in a way its engine's breaker counts (the fault table's Counts).
func (l legEnd) counted() bool {
	return !l.neutral && l.fault != nil && l.fault.CountsAgainstEngine()
}

// breakerNews is the one place that decides what a leg's end tells its engine's breaker: a
// failure to count, a success that resets the streak, or nothing (ok false). requestsFault says
// the board found the failure to be the request's own, or its producer's. Nothing is said for a
// neutral end, a fault the table does not count, a success while the engine has no streak to
// reset, or a failure right after this node stalled (every leg in flight timed out at once: the
// node's trouble, not the engine's).
func (env *requestEnv) breakerNews(l legEnd, requestsFault bool) (m messages.LegOutcome, ok bool) {
	switch {
	case l.neutral:
		return m, false
	case l.fault == nil:
		return messages.LegOutcome{Partner: l.partner}, l.engine.Streak.Load() != 0
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
		sender.Send(pidOf(l.engine), &news)
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
		if !l.counted() {
			s.tell(ctx, l, false)
			continue
		}
		if r == nil {
			r = &blameReport{fp: s.fingerprint, committed: committed}
			if committed {
				r.consumer, r.producer = s.consumer, s.producer
			}
		}
		r.ends = append(r.ends, l)
	}
	if r != nil {
		ctx.Send(s.env.board, r)
	}
}

// sameWay says two failures on different engines look alike: the same leg, the same fault kind
// and the same engine status.
func sameWay(a, b legEnd) bool {
	return a.engine != b.engine && a.phase == b.phase && a.fault.Kind == b.fault.Kind && a.fault.Status == b.fault.Status
}

// handoffNews is what a producer's breaker is told when the board finds its handoffs failing on
// two or more consumers (the decode leg l, on consumer l.engine, read one of them): a failure
// of the producer's.
func (env *requestEnv) handoffNews(l legEnd) (m messages.LegOutcome, ok bool) {
	if env.cluster.Fenced() {
		return m, false
	}
	return messages.LegOutcome{Failed: true,
		Note: "its handoff failed on consumer " + l.engine.Name + " (" + l.fault.Kind.String() + " on the decode leg)"}, true
}

// fingerprintOf is a request's fingerprint: the FNV-1a hash of its body's length and of at most
// fingerprintEdge bytes at each end (a bounded cost whatever the prompt's length). Two requests
// with the same fingerprint are taken for the same request sent again. Never 0.
func fingerprintOf(body []byte) uint64 {
	h := uint64(14695981039346656037)
	for n := len(body); n > 0; n >>= 8 {
		h = (h ^ uint64(n&0xff)) * 1099511628211
	}
	head, tail := body, []byte(nil)
	if len(body) > 2*fingerprintEdge {
		head, tail = body[:fingerprintEdge], body[len(body)-fingerprintEdge:]
	}
	for _, c := range head {
		h = (h ^ uint64(c)) * 1099511628211
	}
	for _, c := range tail {
		h = (h ^ uint64(c)) * 1099511628211
	}
	return h | 1
}

const fingerprintEdge = 2048

// commitTable remembers which fingerprints committed lately: a fixed table of commitSlots
// slots, each the last fingerprint that committed into it and when, written by supervisors
// at commit without a lock and read by the blame board. A slot another fingerprint took over
// forgets the first: the table says "committed lately" for sure only of what it still holds.
type commitTable struct {
	slots [commitSlots]struct {
		fp atomic.Uint64
		at atomic.Int64
	}
}

const commitSlots = 4096

func (t *commitTable) committed(fp uint64, now time.Time) {
	s := &t.slots[fp%commitSlots]
	s.fp.Store(fp)
	s.at.Store(now.UnixNano())
}

// since says a request with fingerprint fp committed after the given time.
func (t *commitTable) since(fp uint64, after time.Time) bool {
	s := &t.slots[fp%commitSlots]
	return s.fp.Load() == fp && s.at.Load() > after.UnixNano()
}
