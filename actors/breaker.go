package actors

import (
	"strings"
	"time"

	"github.com/narwhal-router/narwhal/config"
)

// breakerState is where an engine stands with the router.
type breakerState uint8

const (
	admitted    breakerState = iota // placeable
	quarantined                     // excluded until quarantineEnds, then admitted again
	ejected                         // excluded until a probe succeeds
	probing                         // excluded; a probe is in flight
	joining                         // new to the fleet: excluded until its join check passes
)

// breakerStateNames names every state, in order (the engine_state gauge reports each).
var breakerStateNames = [...]string{admitted: "admitted", quarantined: "quarantined", ejected: "ejected", probing: "probing", joining: "joining"}

func (s breakerState) String() string {
	if int(s) < len(breakerStateNames) {
		return breakerStateNames[s]
	}
	return "probing"
}

// breaker is one engine's circuit breaker: a failure streak that ejects the engine after
// recovery.eject_after consecutive failures, an optional quarantine after any failure, and the
// probe cadence that decides readmission. It is plain state owned by the engine actor; the
// engine actor's restarts keep it.
type breaker struct {
	cfg config.RecoveryRuntime

	state          breakerState
	streak         int
	quarantineEnds time.Time
	ejectedAt      time.Time
	// partner is the producer of the crossed decode whose failure ejected this engine; its
	// probe must use a handoff from that producer.
	partner       string
	probeInterval time.Duration
	nextProbe     time.Time

	// byAdmin marks an operator's ejection: no probe readmits it, only an operator does.
	byAdmin bool
	// cause says why the engine is ejected: the failures of the streak that ejected it, or the
	// operator's reason.
	cause string
	// recent describes the failures of the current streak, newest last (at most eject_after).
	recent []string
}

// newBreaker is the breaker of an engine new to the fleet: joining, until its join check
// admits it (joined) or ejects it (joinFailed).
func newBreaker(cfg config.RecoveryRuntime) breaker {
	return breaker{cfg: cfg, probeInterval: cfg.ProbeInterval, state: joining}
}

// joined admits a joining engine whose check passed.
func (b *breaker) joined() { b.probeSucceeded() }

// joinFailed ejects a joining engine whose check failed, for the cause given; it is probed
// like any ejected engine.
func (b *breaker) joinFailed(now time.Time, cause string) {
	b.eject(now, "")
	b.cause = cause
}

// reconfigure applies recovery settings changed by a reload: the next failure, quarantine and
// probe use them; a probe already scheduled keeps its time.
func (b *breaker) reconfigure(cfg config.RecoveryRuntime) {
	b.cfg = cfg
	b.probeInterval = min(max(b.probeInterval, cfg.ProbeInterval), cfg.ProbeMaxInterval)
}

func (b *breaker) placeable() bool { return b.state == admitted }

// success resets the streak.
func (b *breaker) success() { b.streak, b.recent = 0, b.recent[:0] }

// takesOut says what the next counted failure would do: true when it quarantines or ejects the
// engine (or the engine is out of placement already). The engine actor publishes it so that a
// request supervisor retrying after a failure keeps off an engine about to leave placement
// without re-deriving the rule.
func (b *breaker) takesOut() bool {
	return b.state != admitted || b.cfg.FailureQuarantine > 0 || b.streak+1 >= b.cfg.EjectAfter
}

// note records what the failure about to be counted was, for the ejection's cause.
func (b *breaker) note(what string) {
	if b.state == ejected || b.state == probing || b.state == joining {
		return
	}
	if len(b.recent) >= max(b.cfg.EjectAfter, 1) {
		b.recent = append(b.recent[:0], b.recent[1:]...)
	}
	b.recent = append(b.recent, what)
}

// failure counts a failure that is the engine's fault. It reports whether the engine was just
// ejected.
func (b *breaker) failure(now time.Time, partner string) (ejectedNow bool) {
	if b.state == ejected || b.state == probing || b.state == joining {
		return false
	}
	b.streak++
	if b.streak >= b.cfg.EjectAfter {
		b.eject(now, partner)
		return true
	}
	if q := b.cfg.FailureQuarantine; q > 0 {
		b.state = quarantined
		b.quarantineEnds = now.Add(q)
	}
	return false
}

// eject takes the engine out of placement after its failures and schedules its first probe.
func (b *breaker) eject(now time.Time, partner string) {
	b.state = ejected
	b.ejectedAt = now
	b.partner = partner
	b.probeInterval = b.cfg.ProbeInterval
	b.nextProbe = now.Add(b.probeInterval)
	b.quarantineEnds = time.Time{}
	b.byAdmin = false
	b.cause = strings.Join(b.recent, "; ")
}

// ejectByAdmin takes the engine out of placement for an operator. No probe is scheduled: the
// ejection holds until an operator readmits the engine.
func (b *breaker) ejectByAdmin(now time.Time, reason string) {
	b.state = ejected
	b.ejectedAt = now
	b.partner = ""
	b.nextProbe = time.Time{}
	b.quarantineEnds = time.Time{}
	b.byAdmin = true
	b.cause = reason
}

// quarantineOver readmits a quarantined engine whose quarantine has ended.
func (b *breaker) quarantineOver(now time.Time) bool {
	if b.state == quarantined && !now.Before(b.quarantineEnds) {
		b.state = admitted
		b.quarantineEnds = time.Time{}
		return true
	}
	return false
}

// probeStarted marks a probe in flight.
func (b *breaker) probeStarted() { b.state = probing }

// ejectedBy names who ejected the engine ("admin" or "breaker"); "" while it is not ejected.
func (b *breaker) ejectedBy() string {
	switch {
	case b.state != ejected && b.state != probing:
		return ""
	case b.byAdmin:
		return "admin"
	}
	return "breaker"
}

// probeSucceeded readmits the engine with a clean streak.
func (b *breaker) probeSucceeded() {
	b.state = admitted
	b.streak = 0
	b.partner = ""
	b.ejectedAt = time.Time{}
	b.nextProbe = time.Time{}
	b.probeInterval = b.cfg.ProbeInterval
	b.byAdmin = false
	b.cause = ""
	b.recent = b.recent[:0]
}

// probeFailed keeps the engine ejected and backs the next probe off, doubling up to the maximum.
func (b *breaker) probeFailed(now time.Time) {
	b.state = ejected
	b.probeInterval = min(2*b.probeInterval, b.cfg.ProbeMaxInterval)
	b.nextProbe = now.Add(b.probeInterval)
}

// probeInconclusive changes nothing about the engine: it returns to the normal cadence.
func (b *breaker) probeInconclusive(now time.Time) {
	b.state = ejected
	b.nextProbe = now.Add(b.probeInterval)
}
