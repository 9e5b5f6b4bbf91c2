package health

import (
	"sync/atomic"
	"time"

	"github.com/narwhal-router/narwhal/messages"
	"github.com/narwhal-router/narwhal/transport/fault"
)

// What a request tells the breakers. Every leg that held a slot ends once; how it ended is a
// Leg. Before the request commits, its leg ends wait for the request's fate; the failures then
// go to the blame board (Board), which compares them with other requests' before it counts
// any. After the commit a leg's end is told at once. Either way News alone turns a leg's end
// into what the engine's breaker is told (HandoffNews, for a producer blamed for a consumer's
// failed read), and the engine actor applies it as it is.

// Leg is how one leg of a request ended on its engine; E is the engine record (the actors'
// *placement.Engine), compared by identity.
type Leg[E comparable] struct {
	Engine E
	Phase  fault.Phase
	// Fault is nil when the leg succeeded.
	Fault *fault.Fault
	// Neutral says the leg's end says nothing about the engine: the request was cancelled on
	// our side, or the slot was given back unused.
	Neutral bool
	// Partner names the attempt's other engine ("" for a local decode or a same-worker one);
	// Producer is that engine for a decode leg (the zero E without one).
	Partner  string
	Producer E
}

// Counted says the leg failed in a way its engine's breaker counts (the fault table's Counts).
func (l Leg[E]) Counted() bool {
	return !l.Neutral && l.Fault != nil && l.Fault.CountsAgainstEngine()
}

// Transfer says the leg is a decode that failed while reading a producer's handoff: a fault of
// the pair, until other failures show which side it is.
func (l Leg[E]) Transfer() bool {
	var none E
	return l.Phase == fault.PhaseDecode && l.Producer != none && l.Counted()
}

// News is the one decision of what a leg's end tells its engine's breaker: a failure to count,
// a success that resets the streak, or nothing (ok false). streaking says the engine has a
// streak a success would reset; requestsFault that the blame board found the failure to be the
// request's own, or its producer's; fenced that this node just stalled (every leg in flight
// timed out at once: the node's trouble, not the engine's). Nothing is said for a neutral end,
// a fault the table does not count, a success with no streak to reset, or a failure while
// fenced or found to be another's.
func (l Leg[E]) News(streaking, requestsFault, fenced bool) (m messages.LegOutcome, ok bool) {
	switch {
	case l.Neutral:
		return m, false
	case l.Fault == nil:
		return messages.LegOutcome{Partner: l.Partner}, streaking
	case !l.Fault.CountsAgainstEngine(), requestsFault, fenced:
		return m, false
	}
	note := l.Fault.Kind.String() + " on the " + l.Phase.String() + " leg"
	if l.Partner != "" {
		note += " (partner " + l.Partner + ")"
	}
	return messages.LegOutcome{Failed: true, Note: note, Partner: l.Partner}, true
}

// HandoffNews is what a producer's breaker is told when the board finds its handoffs failing
// on two or more consumers (l, a decode leg on consumer, read one of them): a failure of the
// producer's. Nothing while fenced.
func HandoffNews[E comparable](l Leg[E], consumer string, fenced bool) (m messages.LegOutcome, ok bool) {
	if fenced {
		return m, false
	}
	return messages.LegOutcome{Failed: true,
		Note: "its handoff failed on consumer " + consumer + " (" + l.Fault.Kind.String() + " on the decode leg)"}, true
}

// Fingerprint is a request's fingerprint: the FNV-1a hash of its body's length and of at most
// fingerprintEdge bytes at each end (a bounded cost whatever the prompt's length). Two requests
// with the same fingerprint are taken for the same request sent again. Never 0.
func Fingerprint(body []byte) uint64 {
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

// CommitTable remembers which fingerprints committed lately: a fixed table of commitSlots
// slots, each the last fingerprint that committed into it and when. Writers: the request
// supervisors, at commit, without a lock; the blame board reads it. A slot another
// fingerprint took over forgets the first: the table says "committed lately" for sure only of
// what it still holds.
type CommitTable struct {
	slots [commitSlots]struct {
		fp atomic.Uint64
		at atomic.Int64
	}
}

const commitSlots = 4096

// Committed records a commit of a request with fingerprint fp at now.
func (t *CommitTable) Committed(fp uint64, now time.Time) {
	s := &t.slots[fp%commitSlots]
	s.fp.Store(fp)
	s.at.Store(now.UnixNano())
}

// Since says a request with fingerprint fp committed after the given time.
func (t *CommitTable) Since(fp uint64, after time.Time) bool {
	s := &t.slots[fp%commitSlots]
	return s.fp.Load() == fp && s.at.Load() > after.UnixNano()
}
