package actors

import (
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
)

func (s breakerState) String() string {
	switch s {
	case admitted:
		return "admitted"
	case quarantined:
		return "quarantined"
	case ejected:
		return "ejected"
	}
	return "probing"
}

// breaker is one engine's circuit breaker: a failure streak that ejects the engine after
// recovery.eject_after consecutive failures, an optional quarantine after any failure, and the
// probe cadence that decides readmission. It is plain state owned by the engine actor; the
// engine actor's restarts keep it.
type breaker struct {
	cfg config.Recovery

	state          breakerState
	streak         int
	quarantineEnds time.Time
	ejectedAt      time.Time
	// partner is the producer of the crossed decode whose failure ejected this engine; its
	// probe must use a handoff from that producer.
	partner       string
	probeInterval time.Duration
	nextProbe     time.Time
}

func newBreaker(cfg config.Recovery) breaker {
	return breaker{cfg: cfg, probeInterval: cfg.ProbeIntervalS.Duration()}
}

func (b *breaker) placeable() bool { return b.state == admitted }

// success resets the streak.
func (b *breaker) success() { b.streak = 0 }

// failure counts a failure that is the engine's fault. It reports whether the engine was just
// ejected.
func (b *breaker) failure(now time.Time, partner string) (ejectedNow bool) {
	if b.state == ejected || b.state == probing {
		return false
	}
	b.streak++
	if b.streak >= b.cfg.EjectAfter {
		b.eject(now, partner)
		return true
	}
	if q := b.cfg.FailureQuarantineS.Duration(); q > 0 {
		b.state = quarantined
		b.quarantineEnds = now.Add(q)
	}
	return false
}

// eject takes the engine out of placement and schedules its first probe.
func (b *breaker) eject(now time.Time, partner string) {
	b.state = ejected
	b.ejectedAt = now
	b.partner = partner
	b.probeInterval = b.cfg.ProbeIntervalS.Duration()
	b.nextProbe = now.Add(b.probeInterval)
	b.quarantineEnds = time.Time{}
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

// probeSucceeded readmits the engine with a clean streak.
func (b *breaker) probeSucceeded() {
	b.state = admitted
	b.streak = 0
	b.partner = ""
	b.ejectedAt = time.Time{}
	b.nextProbe = time.Time{}
	b.probeInterval = b.cfg.ProbeIntervalS.Duration()
}

// probeFailed keeps the engine ejected and backs the next probe off, doubling up to the maximum.
func (b *breaker) probeFailed(now time.Time) {
	b.state = ejected
	b.probeInterval = min(2*b.probeInterval, b.cfg.ProbeMaxIntervalS.Duration())
	b.nextProbe = now.Add(b.probeInterval)
}

// probeInconclusive changes nothing about the engine: it returns to the normal cadence.
func (b *breaker) probeInconclusive(now time.Time) {
	b.state = ejected
	b.nextProbe = now.Add(b.probeInterval)
}
