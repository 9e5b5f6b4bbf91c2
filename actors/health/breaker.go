package health

import (
	"strings"
	"time"

	"github.com/narwhal-router/narwhal/config"
)

// State is where an engine stands with the router.
type State uint8

const (
	Admitted    State = iota // placeable
	Quarantined              // excluded until QuarantineEnds, then admitted again
	Ejected                  // excluded until a probe succeeds
	Probing                  // excluded; a probe is in flight
	Joining                  // new to the fleet: excluded until its join check passes
)

// StateNames names every state, in order (the engine_state gauge reports each).
var StateNames = [...]string{Admitted: "admitted", Quarantined: "quarantined", Ejected: "ejected", Probing: "probing", Joining: "joining"}

func (s State) String() string {
	if int(s) < len(StateNames) {
		return StateNames[s]
	}
	return "probing"
}

// Breaker is one engine's circuit breaker: a failure streak that ejects the engine after
// recovery.eject_after consecutive failures, an optional quarantine after any failure, and the
// probe cadence that decides readmission. It is a plain value with the clock passed into every
// decision. Writer: the engine actor that owns the engine (its restarts keep the value); every
// method that changes it is called from that actor's Receive alone, and others read what the
// actor publishes (placement.Engine's Placeable, State, Streak, TakesOut).
type Breaker struct {
	cfg config.RecoveryRuntime

	state          State
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

// NewBreaker is the breaker of an engine new to the fleet: joining, until its join check
// admits it (Joined) or ejects it (EjectFor).
func NewBreaker(cfg config.RecoveryRuntime) Breaker {
	return Breaker{cfg: cfg, probeInterval: cfg.ProbeInterval, state: Joining}
}

// State is where the engine stands.
func (b *Breaker) State() State { return b.state }

// Streak is the number of consecutive counted failures.
func (b *Breaker) Streak() int { return b.streak }

// QuarantineEnds is when a quarantine ends (zero without one).
func (b *Breaker) QuarantineEnds() time.Time { return b.quarantineEnds }

// EjectedAt is when the engine was ejected (zero while it is not).
func (b *Breaker) EjectedAt() time.Time { return b.ejectedAt }

// Partner names the producer whose handoff failed on this consumer when it was ejected.
func (b *Breaker) Partner() string { return b.partner }

// ProbeInterval is the current probe cadence (backed off after failed probes).
func (b *Breaker) ProbeInterval() time.Duration { return b.probeInterval }

// NextProbe is when the next probe is due (zero when none is scheduled).
func (b *Breaker) NextProbe() time.Time { return b.nextProbe }

// ByAdmin says an operator ejected the engine: only an operator readmits it.
func (b *Breaker) ByAdmin() bool { return b.byAdmin }

// Cause says why the engine is ejected ("" while it is not, or when nothing was noted).
func (b *Breaker) Cause() string { return b.cause }

// Joined admits a joining engine whose check passed.
func (b *Breaker) Joined() { b.ProbeSucceeded() }

// EjectFor ejects the engine for the cause given (a failed join check, a producer whose
// descriptors fail validation, a peer's verdict); it is probed like any ejected engine.
func (b *Breaker) EjectFor(now time.Time, cause string) {
	b.eject(now, "")
	b.cause = cause
}

// Reconfigure applies recovery settings changed by a reload: the next failure, quarantine and
// probe use them; a probe already scheduled keeps its time.
func (b *Breaker) Reconfigure(cfg config.RecoveryRuntime) {
	b.cfg = cfg
	b.probeInterval = min(max(b.probeInterval, cfg.ProbeInterval), cfg.ProbeMaxInterval)
}

// Placeable says the engine may be placed.
func (b *Breaker) Placeable() bool { return b.state == Admitted }

// Success resets the streak.
func (b *Breaker) Success() { b.streak, b.recent = 0, b.recent[:0] }

// TakesOut says what the next counted failure would do: true when it quarantines or ejects the
// engine (or the engine is out of placement already). The engine actor publishes it so that a
// request supervisor retrying after a failure keeps off an engine about to leave placement
// without re-deriving the rule.
func (b *Breaker) TakesOut() bool {
	return b.state != Admitted || b.cfg.FailureQuarantine > 0 || b.streak+1 >= b.cfg.EjectAfter
}

// out says the engine is out until a check readmits it: failures say nothing more of it.
func (b *Breaker) out() bool { return b.state == Ejected || b.state == Probing || b.state == Joining }

// Note records what the failure about to be counted was, for the ejection's cause.
func (b *Breaker) Note(what string) {
	if b.out() {
		return
	}
	if len(b.recent) >= max(b.cfg.EjectAfter, 1) {
		b.recent = append(b.recent[:0], b.recent[1:]...)
	}
	b.recent = append(b.recent, what)
}

// Failure counts a failure that is the engine's fault. It reports whether the engine was just
// ejected.
func (b *Breaker) Failure(now time.Time, partner string) (ejectedNow bool) {
	if b.out() {
		return false
	}
	b.streak++
	if b.streak >= b.cfg.EjectAfter {
		b.eject(now, partner)
		return true
	}
	if q := b.cfg.FailureQuarantine; q > 0 {
		b.state = Quarantined
		b.quarantineEnds = now.Add(q)
	}
	return false
}

// eject takes the engine out of placement after its failures and schedules its first probe.
func (b *Breaker) eject(now time.Time, partner string) {
	b.state = Ejected
	b.ejectedAt = now
	b.partner = partner
	b.probeInterval = b.cfg.ProbeInterval
	b.nextProbe = now.Add(b.probeInterval)
	b.quarantineEnds = time.Time{}
	b.byAdmin = false
	b.cause = strings.Join(b.recent, "; ")
}

// EjectByAdmin takes the engine out of placement for an operator. No probe is scheduled: the
// ejection holds until an operator readmits the engine.
func (b *Breaker) EjectByAdmin(now time.Time, reason string) {
	b.state = Ejected
	b.ejectedAt = now
	b.partner = ""
	b.nextProbe = time.Time{}
	b.quarantineEnds = time.Time{}
	b.byAdmin = true
	b.cause = reason
}

// QuarantineOver readmits a quarantined engine whose quarantine has ended.
func (b *Breaker) QuarantineOver(now time.Time) bool {
	if b.state == Quarantined && !now.Before(b.quarantineEnds) {
		b.state = Admitted
		b.quarantineEnds = time.Time{}
		return true
	}
	return false
}

// Quarantine holds an admitted engine out until until (a peer's quarantine); a quarantined one
// keeps the later end. It reports whether the end moved while the engine was quarantined, so
// that its timer is armed again.
func (b *Breaker) Quarantine(until time.Time) (extended bool) {
	switch {
	case b.state == Admitted:
		b.state, b.quarantineEnds = Quarantined, until
	case b.state == Quarantined && until.After(b.quarantineEnds):
		b.quarantineEnds = until
		return true
	}
	return false
}

// ProbeStarted marks a probe in flight.
func (b *Breaker) ProbeStarted() { b.state = Probing }

// ProbeAt moves the next probe of an ejected engine (a peer probes it meanwhile).
func (b *Breaker) ProbeAt(t time.Time) { b.nextProbe = t }

// EjectedBy names who ejected the engine ("admin" or "breaker"); "" while it is not ejected.
func (b *Breaker) EjectedBy() string {
	switch {
	case b.state != Ejected && b.state != Probing:
		return ""
	case b.byAdmin:
		return "admin"
	}
	return "breaker"
}

// ProbeSucceeded readmits the engine with a clean streak.
func (b *Breaker) ProbeSucceeded() {
	b.state = Admitted
	b.streak = 0
	b.partner = ""
	b.ejectedAt = time.Time{}
	b.nextProbe = time.Time{}
	b.probeInterval = b.cfg.ProbeInterval
	b.byAdmin = false
	b.cause = ""
	b.recent = b.recent[:0]
}

// Readmitted readmits the engine on another's word (a peer's verdict): as a probe that
// passed, and no quarantine left to run.
func (b *Breaker) Readmitted() {
	b.ProbeSucceeded()
	b.quarantineEnds = time.Time{}
}

// ProbeFailed keeps the engine ejected and backs the next probe off, doubling up to the maximum.
func (b *Breaker) ProbeFailed(now time.Time) {
	b.state = Ejected
	b.probeInterval = min(2*b.probeInterval, b.cfg.ProbeMaxInterval)
	b.nextProbe = now.Add(b.probeInterval)
}

// ProbeInconclusive changes nothing about the engine: it returns to the normal cadence.
func (b *Breaker) ProbeInconclusive(now time.Time) {
	b.state = Ejected
	b.nextProbe = now.Add(b.probeInterval)
}

// LiftQuarantine readmits a quarantined engine now (an operator's word).
func (b *Breaker) LiftQuarantine() {
	if b.state == Quarantined {
		b.state, b.quarantineEnds = Admitted, time.Time{}
	}
}
