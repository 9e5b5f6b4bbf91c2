package actors

import (
	"time"

	"github.com/asynkron/protoactor-go/actor"

	"github.com/narwhal-router/narwhal/actors/health"
	"github.com/narwhal-router/narwhal/actors/placement"
)

// The blame board decides whom a request's failures blame by comparing them with other
// requests' failures and with the commits of the engines involved, before any is counted:
//
//   - A failure is the request's when the same request (the same body: its fingerprint) failed
//     the same way (leg, fault kind, engine status) on two or more engines within
//     recovery.blame_window_s, no request with that fingerprint committed in the window, and the
//     engine shows it serves other requests: it commits one after the failure, or its last
//     commit is within the window and it failed nothing else since. Such a failure extends no
//     streak; it is counted in request_attributed_failures. When no engine of the fleet
//     committed anything in the window there is no such evidence to wait for: it counts at once.
//   - A decode that failed before its first token on a producer's handoff is a fault of the
//     pair when the request then committed through another producer, or when the producer's
//     handoffs already failed on another consumer in the window. Once that producer's handoffs
//     (of requests that are not themselves failing everywhere) have failed on two or more
//     consumers and the consumer shows it serves other requests, the producer is blamed (its
//     breaker counts the failure) and the consumer is not. When the producer's other handoffs
//     commit meanwhile, the consumer is blamed.
//   - A request sent again that fails the same way on the same engine again waits for the
//     window: if it fails on another engine too meanwhile, the rule above applies; if not, the
//     failure is the engine's.
//   - Everything else is its engine's, at once: a failure of a request that committed elsewhere
//     (through the same producer, for a decode), a single failure, failures of different kinds.
//
// A failure that may be the request's or the producer's is held until the evidence comes, for
// at most the window; then it counts against its engine. A fleet that fails every request has
// no such evidence, so it is still ejected (then the whole-wave policy applies). The board is
// one actor, fed one message per request that failed (commits reach it through lock-free
// counters and the commit table, not messages); what it remembers is bounded: the failures of
// the last window (at most boardRecords) and at most boardHeld held failures (beyond that the
// oldest is counted at once); which fingerprints committed lately is a fixed table the
// supervisors write at commit (blame.go, commitTable).
type blameBoard struct {
	env     *requestEnv
	self    *actor.PID
	recent  []failureRecord // newest last
	held    []heldFailure
	ticking bool
}

const (
	boardRecords = 256
	boardHeld    = 256
	// boardTickEvery is how often the board looks for evidence while it holds failures.
	boardTickEvery = 50 * time.Millisecond
)

// failureRecord is one counted failure the board has seen.
type failureRecord struct {
	fp               uint64
	engine, producer *placement.Engine
	l                legEnd
	// committed says the request committed on another attempt.
	committed bool
	at        time.Time
}

// blameReport is a request's counted failures, sent once its fate is known (judge): fp is the
// request's fingerprint; consumer and producer are the pair it committed on (committed).
type blameReport struct {
	fp                 uint64
	committed          bool
	consumer, producer *placement.Engine
	ends               []legEnd
}

type boardDue struct{}

// suspicion is why a failure is held.
type suspicion uint8

const (
	requestSuspect suspicion = iota + 1 // the request failed the same way on two or more engines
	repeatSuspect                       // the request failed the same way on this engine before
	handoffSuspect                      // a decode failed reading a producer's handoff
)

type heldFailure struct {
	l   legEnd
	fp  uint64
	why suspicion
	at  time.Time
	// commits and producerCommits are the engine's and the producer's commits when held.
	commits, producerCommits uint64
}

func (b *blameBoard) Receive(ctx actor.Context) {
	switch m := ctx.Message().(type) {
	case *actor.Started:
		b.self = ctx.Self()
	case *blameReport:
		b.report(ctx, m)
	case boardDue:
		b.ticking = false
		b.evaluate(ctx)
	}
}

func (b *blameBoard) window() time.Duration { return b.env.current().recovery.BlameWindow }

func (b *blameBoard) report(ctx actor.Context, r *blameReport) {
	now := time.Now()
	b.prune(now)
	for i, l := range r.ends {
		switch {
		case !r.committed && b.failedElsewhere(r, i):
			h := b.newHeld(l, r.fp, requestSuspect, now)
			switch {
			case b.served(&h, func(rec failureRecord) bool { return rec.fp == r.fp }):
				b.attribute(h.l)
			case !b.fleetCommitted(now):
				// No engine committed anything in the window: nothing shows the fleet serves
				// other requests, so the failure is its engine's (a fleet failing everything).
				b.count(ctx, l)
			default:
				b.hold(ctx, h)
			}
		case !r.committed && b.failedHereBefore(r.fp, l):
			// Sent again and failing on the same engine: the request's if it fails on another
			// engine too within the window, else the engine's when the window has passed.
			b.hold(ctx, b.newHeld(l, r.fp, repeatSuspect, now))
		case l.transfer() && !b.handoffsWork(l.producer) &&
			(r.committed && r.producer != l.producer || !r.committed && b.failedOnOthers(l)):
			// The request committed through another producer, or the producer's handoffs failed
			// on another consumer too: the pair's fault, until the evidence tells which side.
			b.hold(ctx, b.newHeld(l, r.fp, handoffSuspect, now))
		default:
			b.count(ctx, l)
		}
	}
	for _, l := range r.ends {
		b.recent = appendBounded(b.recent, failureRecord{fp: r.fp, engine: l.engine, producer: l.producer, l: l,
			committed: r.committed, at: now})
	}
	b.evaluate(ctx)
}

// handoffsWork says the producer committed a request since its first failed handoff in the
// window (or has had none fail): its handoffs are readable, so a consumer's failed read of one
// is the consumer's.
func (b *blameBoard) handoffsWork(p *placement.Engine) bool {
	lc := p.LastCommit.Load()
	for _, rec := range b.recent {
		if rec.producer == p && rec.l.transfer() {
			return lc > rec.at.UnixNano()
		}
	}
	return lc > 0
}

// fleetCommitted says some engine of the fleet committed a request within the window.
func (b *blameBoard) fleetCommitted(now time.Time) bool {
	cut := now.Add(-b.window()).UnixNano()
	for _, e := range b.env.fleet.Load().Engines {
		if e.LastCommit.Load() > cut {
			return true
		}
	}
	return false
}

// failedOnOthers says the producer of the decode l had a handoff fail on another consumer within
// the window, one still in placement (an engine already out is no evidence against its partner).
func (b *blameBoard) failedOnOthers(l legEnd) bool {
	for _, rec := range b.recent {
		if rec.producer == l.producer && rec.engine != l.engine && rec.l.transfer() && rec.engine.Placeable.Load() {
			return true
		}
	}
	return false
}

// attribute records a failure found to be its request's.
func (b *blameBoard) attribute(l legEnd) {
	b.env.metrics.RequestAttributedFailure(l.phase.String(), l.fault.Kind.String())
	b.env.log.Debug("failure attributed to the request", "engine", l.engine.Name,
		"leg", l.phase.String(), "kind", l.fault.Kind.String())
}

// failedElsewhere says end i of r failed the same way as another engine's leg of the same
// request: in r itself, or in a recent failure of a request with the same fingerprint that did
// not commit (and none committed within the window).
func (b *blameBoard) failedElsewhere(r *blameReport, i int) bool {
	l := r.ends[i]
	for j, o := range r.ends {
		if j != i && sameWay(l, o) {
			return true
		}
	}
	if b.fpCommitted(r.fp, time.Time{}) {
		return false
	}
	for _, rec := range b.recent {
		if rec.fp == r.fp && !rec.committed && sameWay(l, rec.l) {
			return true
		}
	}
	return false
}

// failedHereBefore says a request with end l's fingerprint already failed the same way on l's
// own engine within the window, without committing anywhere: it may be a poison request that
// has not met another engine yet.
func (b *blameBoard) failedHereBefore(fp uint64, l legEnd) bool {
	if b.fpCommitted(fp, time.Time{}) {
		return false
	}
	for _, rec := range b.recent {
		if rec.fp == fp && !rec.committed && rec.engine == l.engine && rec.l.phase == l.phase &&
			rec.l.fault.Kind == l.fault.Kind && rec.l.fault.Status == l.fault.Status {
			return true
		}
	}
	return false
}

// failedOnAnother says a request with h's fingerprint failed the same way on another engine
// within the window, without committing.
func (b *blameBoard) failedOnAnother(h *heldFailure) bool {
	for _, rec := range b.recent {
		if rec.fp == h.fp && !rec.committed && sameWay(h.l, rec.l) {
			return true
		}
	}
	return false
}

// fpCommitted says a request with fingerprint fp committed after since (and within the window).
func (b *blameBoard) fpCommitted(fp uint64, since time.Time) bool {
	if cut := time.Now().Add(-b.window()); since.Before(cut) {
		since = cut
	}
	return b.env.commits.since(fp, since)
}

// failsEverywhere says requests with fingerprint fp failed, without committing, on two or more
// engines within the window: such a request's failed handoffs say nothing of its producer.
func (b *blameBoard) failsEverywhere(fp uint64) bool {
	if b.fpCommitted(fp, time.Time{}) {
		return false
	}
	var first *placement.Engine
	for _, rec := range b.recent {
		if rec.fp != fp || rec.committed {
			continue
		}
		if first == nil {
			first = rec.engine
		} else if rec.engine != first {
			return true
		}
	}
	return false
}

// producerSuspect says the producer's handoffs failed on two or more consumers within the
// window (health.ProducerSuspect: consumers in placement, requests that do not fail
// everywhere), and marks it suspect for probes.
func (b *blameBoard) producerSuspect(p *placement.Engine, now time.Time) bool {
	var failures []health.HandoffFailure
	for _, rec := range b.recent {
		if rec.producer != p || !rec.l.transfer() {
			continue
		}
		failures = append(failures, health.HandoffFailure{Consumer: rec.engine.Name,
			ConsumerOut: !rec.engine.Placeable.Load(), FailsEverywhere: b.failsEverywhere(rec.fp)})
	}
	if !health.ProducerSuspect(failures) {
		return false
	}
	p.Suspect.Store(now.Add(b.window()).UnixNano())
	return true
}

// served says the held failure's engine shows it serves other requests: it committed one since
// the failure, or its last commit is within the window and every failure it had since is of the
// same cause as this one (sameCause).
func (b *blameBoard) served(h *heldFailure, sameCause func(failureRecord) bool) bool {
	e := h.l.engine
	if e.Commits.Load() > h.commits {
		return true
	}
	lc := e.LastCommit.Load()
	if lc == 0 || time.Duration(h.at.UnixNano()-lc) > b.window() {
		return false
	}
	for _, rec := range b.recent {
		if rec.engine == e && rec.at.UnixNano() > lc && !sameCause(rec) {
			return false
		}
	}
	return true
}

func (b *blameBoard) newHeld(l legEnd, fp uint64, why suspicion, now time.Time) heldFailure {
	h := heldFailure{l: l, fp: fp, why: why, at: now, commits: l.engine.Commits.Load()}
	if l.producer != nil {
		h.producerCommits = l.producer.Commits.Load()
	}
	return h
}

func (b *blameBoard) hold(ctx actor.Context, h heldFailure) {
	if len(b.held) >= boardHeld {
		b.count(ctx, b.held[0].l)
		b.held = append(b.held[:0], b.held[1:]...)
	}
	b.held = append(b.held, h)
}

// evaluate decides every held failure whose evidence has come or whose window has passed, and
// looks again in a while if some are still held.
func (b *blameBoard) evaluate(ctx actor.Context) {
	now := time.Now()
	b.prune(now)
	kept := b.held[:0]
	for i := range b.held {
		if h := &b.held[i]; !b.decide(ctx, h, now) {
			kept = append(kept, *h)
		}
	}
	clear(b.held[len(kept):])
	b.held = kept
	if len(b.held) > 0 && !b.ticking {
		b.ticking = true
		self, root := b.self, b.env.root
		time.AfterFunc(boardTickEvery, func() { root.Send(self, boardDue{}) })
	}
}

// decide settles h if it can, reporting whether it did.
func (b *blameBoard) decide(ctx actor.Context, h *heldFailure, now time.Time) bool {
	if h.why == handoffSuspect && b.failsEverywhere(h.fp) {
		h.why = requestSuspect // the request fails on every consumer: not the producer's doing
	}
	if h.why == repeatSuspect && b.failedOnAnother(h) {
		h.why = requestSuspect
	}
	switch h.why {
	case requestSuspect:
		if b.fpCommitted(h.fp, h.at) { // the same request committed elsewhere: the engine's
			b.count(ctx, h.l)
			return true
		}
		if b.served(h, func(rec failureRecord) bool { return rec.fp == h.fp }) {
			b.attribute(h.l)
			return true
		}
	case handoffSuspect:
		p := h.l.producer
		switch {
		case b.producerSuspect(p, now):
			if b.served(h, func(rec failureRecord) bool { return rec.producer == p }) {
				if m, ok := b.env.handoffNews(h.l); ok {
					ctx.Send(pidOf(p), &m)
				}
				b.env.log.Info("failed handoff blamed on the producer: its handoffs fail on two or more consumers",
					"producer", p.Name, "consumer", h.l.engine.Name, "kind", h.l.fault.Kind.String())
				return true
			}
		case p.Commits.Load() > h.producerCommits: // the producer's handoffs commit elsewhere
			b.count(ctx, h.l)
			return true
		}
	}
	if now.Sub(h.at) >= b.window() {
		b.count(ctx, h.l)
		return true
	}
	return false
}

// count tells the engine's breaker of a failure that is its own.
func (b *blameBoard) count(ctx actor.Context, l legEnd) {
	if m, ok := b.env.breakerNews(l, false); ok {
		ctx.Send(pidOf(l.engine), &m)
	}
}

// prune forgets what is older than the window.
func (b *blameBoard) prune(now time.Time) {
	cut := now.Add(-b.window())
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
