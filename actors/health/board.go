package health

import "time"

// The blame board decides whom a request's failures blame by comparing them with other
// requests' failures and with the commits of the engines involved, before any is counted:
//
//   - A failure is the request's when the same request (the same body: its fingerprint) failed,
//     without committing, on two or more engines within recovery.blame_window_s — however each
//     engine failed it: on a loaded engine the first-token timeout fires before the failure the
//     request causes elsewhere — no request with that fingerprint committed in the window, and
//     the engine shows it serves other requests: it commits one after the failure, or it
//     committed one within the window before it (what else it failed since is judged on its
//     own). Such a failure extends no streak, nor any producer's or pair's; it is counted in
//     request_attributed_failures. This rule comes first: a failure suspected of being its
//     producer's, its pair's or a repeat on one engine is the request's once the request fails
//     on another engine too. When no engine of the fleet committed anything in the window there
//     is no evidence to wait for: it counts at once.
//   - A decode that failed before its first token on a producer's handoff is a fault of the
//     pair when the request then committed through another producer, or when the producer's
//     handoffs already failed on another consumer in the window. Once that producer's handoffs
//     (of requests that are not themselves failing everywhere) have failed on two or more
//     consumers in placement (ProducerSuspect) and the consumer shows it serves other requests,
//     the producer is blamed (its breaker counts the failure) and the consumer is not. When the
//     producer's other handoffs commit meanwhile, the consumer is blamed.
//   - A request sent again that fails the same way on the same engine again waits for the
//     window: if it fails on another engine too meanwhile, the first rule applies; if not, the
//     failure is the engine's.
//   - Everything else is its engine's, at once: a failure of a request that committed elsewhere
//     (through the same producer, for a decode), a single failure (a request tried on one engine
//     only cannot be told from an engine's fault until it fails on another).
//
// A failure that may be the request's or the producer's is held until the evidence comes, for
// at most the window; then it counts against its engine. A fleet that fails every request has
// no such evidence, so it is still ejected (then the whole-wave policy applies). What the board
// remembers is bounded: the failures of the last window (at most boardRecords) and at most
// boardHeld held failures (beyond that the oldest is counted at once).

// Facts are the counters the board reads, written by others: the engines' commits (the request
// supervisors, at commit), whether an engine is in placement (its engine actor), which
// fingerprints committed lately (CommitTable).
type Facts[E comparable] interface {
	// Commits counts the requests that committed with e; LastCommit is the newest one's time
	// (unix nanoseconds; 0: none).
	Commits(e E) uint64
	LastCommit(e E) int64
	// InPlacement says e is admitted now.
	InPlacement(e E) bool
	// FleetCommittedAfter says some engine of the fleet committed after cut (unix nanoseconds).
	FleetCommittedAfter(cut int64) bool
	// CommittedAfter says a request with fingerprint fp committed after the time given.
	CommittedAfter(fp uint64, after time.Time) bool
	// OtherPartners says producer p may hand to another consumer in placement, and consumer c
	// read another producer's handoffs: keeping the pair apart leaves both something to do.
	OtherPartners(p, c E) bool
}

// Report is one request's counted failures, sent once its fate is known: FP is its
// fingerprint; Committed says it committed on another attempt, through Producer (the zero E
// for a local decode) to Consumer.
type Report[E comparable] struct {
	FP                 uint64
	Committed          bool
	Producer, Consumer E
	Ends               []Leg[E]
}

// Verdict is what the board found a failure to be.
type Verdict uint8

const (
	// Count: the failure is its engine's; its breaker is told (Leg.News).
	Count Verdict = iota + 1
	// Attribute: the failure is its request's; it extends no streak.
	Attribute
	// BlameProducer: the failure is its producer's; the producer's breaker is told
	// (HandoffNews), the consumer's is not.
	BlameProducer
	// Suspect: the producer's handoffs fail on two or more consumers; until Until a consumer's
	// probe picks another partner.
	Suspect
	// BlamePair: the failure is the pair's (pairblame.go): the consumer cannot read this
	// producer's handoffs while both serve others. The pair's breaker opens (PairBreakers);
	// neither engine's breaker is told.
	BlamePair
)

// Decision is one thing the board decided, for the board's actor to apply in order.
type Decision[E comparable] struct {
	Verdict Verdict
	Leg     Leg[E]
	// Until is when a Suspect verdict lapses.
	Until time.Time
}

// Board is the blame board's memory and rules. Writer: the blame board actor alone; every
// method takes the clock and recovery.blame_window_s, and returns what it decided.
type Board[E comparable] struct {
	facts  Facts[E]
	recent []failureRecord[E] // newest last
	held   []heldFailure[E]

	// now and window are the current call's.
	now    time.Time
	window time.Duration
	out    []Decision[E]
}

const (
	boardRecords = 256
	boardHeld    = 256
)

// NewBoard is an empty board reading facts.
func NewBoard[E comparable](facts Facts[E]) *Board[E] { return &Board[E]{facts: facts} }

// failureRecord is one counted failure the board has seen.
type failureRecord[E comparable] struct {
	fp  uint64
	leg Leg[E]
	// committed says the request committed on another attempt.
	committed bool
	at        time.Time
}

// suspicion is why a failure is held.
type suspicion uint8

const (
	requestSuspect suspicion = iota + 1 // the request failed on two or more engines, committing nowhere
	repeatSuspect                       // the request failed the same way on this engine before
	handoffSuspect                      // a decode failed reading a producer's handoff
	pairSuspect                         // ... and the failures are confined to that pair (pairblame.go)
)

type heldFailure[E comparable] struct {
	l   Leg[E]
	fp  uint64
	why suspicion
	at  time.Time
	// commits and producerCommits are the engine's and the producer's commits when held.
	commits, producerCommits uint64
}

// Holding says failures are held for evidence: Evaluate should run again shortly.
func (b *Board[E]) Holding() bool { return len(b.held) > 0 }

// Report takes a request's counted failures and decides what it can.
func (b *Board[E]) Report(r Report[E], now time.Time, window time.Duration) []Decision[E] {
	b.begin(now, window)
	for i, l := range r.Ends {
		switch {
		case !r.Committed && b.failedElsewhere(r, i):
			h := b.newHeld(l, r.FP, requestSuspect)
			switch {
			case b.served(&h, nil):
				b.decide(Attribute, h.l)
			case !b.facts.FleetCommittedAfter(now.Add(-window).UnixNano()):
				// No engine committed anything in the window: nothing shows the fleet serves
				// other requests, so the failure is its engine's (a fleet failing everything).
				b.decide(Count, l)
			default:
				b.hold(h)
			}
		case !r.Committed && b.failedHereBefore(r.FP, l):
			// Sent again and failing on the same engine: the request's if it fails on another
			// engine too within the window, else the engine's when the window has passed.
			b.hold(b.newHeld(l, r.FP, repeatSuspect))
		case b.pairFailedBefore(l, r), b.pairsAtOnce(l, r):
			// Another request failed on this very pair, or this one then committed through
			// another producer to this consumer, and nothing else failed on either engine: the
			// pair's. (A request failing the same way everywhere is the request's first.)
			b.decide(BlamePair, l)
		case l.Transfer() && !b.handoffsWork(l.Producer) &&
			(r.Committed && r.Producer != l.Producer || !r.Committed && b.failedOnOthers(l)):
			// The request committed through another producer, or the producer's handoffs failed
			// on another consumer too: the pair's fault, until the evidence tells which side.
			b.hold(b.newHeld(l, r.FP, handoffSuspect))
		case b.mayBePairs(l, r):
			b.hold(b.newHeld(l, r.FP, pairSuspect))
		default:
			b.decide(Count, l)
		}
	}
	for _, l := range r.Ends {
		b.recent = appendBounded(b.recent, failureRecord[E]{fp: r.FP, leg: l, committed: r.Committed, at: now})
	}
	b.evaluate()
	return b.out
}

// Evaluate decides every held failure whose evidence has come or whose window has passed.
func (b *Board[E]) Evaluate(now time.Time, window time.Duration) []Decision[E] {
	b.begin(now, window)
	b.evaluate()
	return b.out
}

func (b *Board[E]) begin(now time.Time, window time.Duration) {
	b.now, b.window, b.out = now, window, nil
	b.prune()
}

func (b *Board[E]) decide(v Verdict, l Leg[E]) {
	b.out = append(b.out, Decision[E]{Verdict: v, Leg: l})
}

func (b *Board[E]) evaluate() {
	b.prune()
	kept := b.held[:0]
	for i := range b.held {
		if h := &b.held[i]; !b.settle(h) {
			kept = append(kept, *h)
		}
	}
	clear(b.held[len(kept):])
	b.held = kept
}

// settle decides h if it can, reporting whether it did.
func (b *Board[E]) settle(h *heldFailure[E]) bool {
	if h.why != requestSuspect && b.failsEverywhere(h.fp) {
		// The request failed on another engine too meanwhile: whatever else this failure was
		// suspected of (a repeat on this engine, its producer, its pair), it is the request's.
		h.why = requestSuspect
	}
	switch h.why {
	case requestSuspect:
		if b.fpCommitted(h.fp, h.at) { // the same request committed elsewhere: the engine's
			b.decide(Count, h.l)
			return true
		}
		if b.served(h, nil) {
			b.decide(Attribute, h.l)
			return true
		}
	case handoffSuspect:
		p := h.l.Producer
		switch {
		case b.producerSuspect(h.l):
			if b.served(h, func(rec failureRecord[E]) bool { return rec.leg.Producer == p }) {
				b.decide(BlameProducer, h.l)
				return true
			}
		case b.facts.Commits(p) > h.producerCommits && b.confinedToPair(h.l, nil):
			h.why = pairSuspect // the producer's handoffs commit elsewhere: the consumer's, or the pair's
			return b.settle(h)
		case b.facts.Commits(p) > h.producerCommits: // the producer's handoffs commit elsewhere
			b.decide(Count, h.l)
			return true
		}
	case pairSuspect:
		if v, ok := b.settlePair(h); ok {
			b.decide(v, h.l)
			return true
		}
	}
	if b.now.Sub(h.at) >= b.window {
		b.decide(Count, h.l)
		return true
	}
	return false
}

// handoffsWork says the producer committed a request since its first failed handoff in the
// window (or has had none fail): its handoffs are readable, so a consumer's failed read of one
// is the consumer's.
func (b *Board[E]) handoffsWork(p E) bool {
	lc := b.facts.LastCommit(p)
	for _, rec := range b.recent {
		if rec.leg.Producer == p && rec.leg.Transfer() {
			return lc > rec.at.UnixNano()
		}
	}
	return lc > 0
}

// failedOnOthers says the producer of the decode l had a handoff fail on another consumer within
// the window, one still in placement (an engine already out is no evidence against its partner).
func (b *Board[E]) failedOnOthers(l Leg[E]) bool {
	for _, rec := range b.recent {
		if rec.leg.Producer == l.Producer && rec.leg.Engine != l.Engine && rec.leg.Transfer() && b.facts.InPlacement(rec.leg.Engine) {
			return true
		}
	}
	return false
}

// failedElsewhere says end i of r, a request that did not commit, is one of the failures of a
// request failing everywhere: the request failed on another engine too, in r itself or in a
// recent failure of a request with the same fingerprint that did not commit (and none committed
// within the window). How it failed there does not matter: on a loaded engine the first-token
// timeout fires before the failure the request causes everywhere else.
func (b *Board[E]) failedElsewhere(r Report[E], i int) bool {
	l := r.Ends[i]
	for _, o := range r.Ends {
		if o.Engine != l.Engine {
			return true
		}
	}
	if b.fpCommitted(r.FP, time.Time{}) {
		return false
	}
	for _, rec := range b.recent {
		if rec.fp == r.FP && !rec.committed && rec.leg.Engine != l.Engine {
			return true
		}
	}
	return false
}

// failedHereBefore says a request with end l's fingerprint already failed the same way on l's
// own engine within the window, without committing anywhere: it may be a poison request that
// has not met another engine yet.
func (b *Board[E]) failedHereBefore(fp uint64, l Leg[E]) bool {
	if b.fpCommitted(fp, time.Time{}) {
		return false
	}
	for _, rec := range b.recent {
		if rec.fp == fp && !rec.committed && rec.leg.Engine == l.Engine && rec.leg.Phase == l.Phase &&
			rec.leg.Fault.Kind == l.Fault.Kind && rec.leg.Fault.Status == l.Fault.Status {
			return true
		}
	}
	return false
}

// fpCommitted says a request with fingerprint fp committed after since (and within the window).
func (b *Board[E]) fpCommitted(fp uint64, since time.Time) bool {
	if cut := b.now.Add(-b.window); since.Before(cut) {
		since = cut
	}
	return b.facts.CommittedAfter(fp, since)
}

// failsEverywhere says requests with fingerprint fp failed, without committing, on two or more
// engines within the window: such a request's failed handoffs say nothing of its producer.
func (b *Board[E]) failsEverywhere(fp uint64) bool {
	if b.fpCommitted(fp, time.Time{}) {
		return false
	}
	var first, none E
	for _, rec := range b.recent {
		if rec.fp != fp || rec.committed {
			continue
		}
		if first == none {
			first = rec.leg.Engine
		} else if rec.leg.Engine != first {
			return true
		}
	}
	return false
}

// producerSuspect says the producer of l's handoffs failed on two or more consumers within the
// window (ProducerSuspect: consumers in placement, requests that do not fail everywhere), and
// marks it suspect until the window passes.
func (b *Board[E]) producerSuspect(l Leg[E]) bool {
	var failures []HandoffFailure[E]
	for _, rec := range b.recent {
		if rec.leg.Producer != l.Producer || !rec.leg.Transfer() {
			continue
		}
		failures = append(failures, HandoffFailure[E]{Consumer: rec.leg.Engine,
			ConsumerOut: !b.facts.InPlacement(rec.leg.Engine), FailsEverywhere: b.failsEverywhere(rec.fp)})
	}
	if !ProducerSuspect(failures) {
		return false
	}
	b.out = append(b.out, Decision[E]{Verdict: Suspect, Leg: l, Until: b.now.Add(b.window)})
	return true
}

// served says the held failure's engine shows it serves other requests: it committed one since
// the failure, or its last commit is within the window and every failure it had since is of the
// same cause as this one (sameCause; nil: whatever it failed since).
//
// A request failing everywhere passes nil: what else its engine failed since does not matter.
// Each of those failures is judged on its own (one of a request that committed elsewhere counts
// against the engine), and those of requests failing everywhere are no evidence against any
// engine — so an engine whose last requests are poisons, as when traffic stops after them, keeps
// them all off its breaker.
func (b *Board[E]) served(h *heldFailure[E], sameCause func(failureRecord[E]) bool) bool {
	e := h.l.Engine
	if b.facts.Commits(e) > h.commits {
		return true
	}
	lc := b.facts.LastCommit(e)
	if lc == 0 || time.Duration(h.at.UnixNano()-lc) > b.window {
		return false
	}
	if sameCause == nil {
		return true
	}
	for _, rec := range b.recent {
		if rec.leg.Engine == e && rec.at.UnixNano() > lc && !sameCause(rec) {
			return false
		}
	}
	return true
}

func (b *Board[E]) newHeld(l Leg[E], fp uint64, why suspicion) heldFailure[E] {
	h := heldFailure[E]{l: l, fp: fp, why: why, at: b.now, commits: b.facts.Commits(l.Engine)}
	var none E
	if l.Producer != none {
		h.producerCommits = b.facts.Commits(l.Producer)
	}
	return h
}

func (b *Board[E]) hold(h heldFailure[E]) {
	if len(b.held) >= boardHeld {
		b.decide(Count, b.held[0].l)
		b.held = append(b.held[:0], b.held[1:]...)
	}
	b.held = append(b.held, h)
}

// prune forgets what is older than the window.
func (b *Board[E]) prune() {
	cut := b.now.Add(-b.window)
	i := 0
	for i < len(b.recent) && b.recent[i].at.Before(cut) {
		i++
	}
	b.recent = append(b.recent[:0], b.recent[i:]...)
}

// appendBounded appends v, dropping the oldest entry once boardRecords are held.
func appendBounded[T any](s []T, v T) []T {
	if len(s) >= boardRecords {
		s = append(s[:0], s[1:]...)
	}
	return append(s, v)
}
