package health

import (
	"cmp"
	"slices"
	"time"

	"github.com/narwhal-router/narwhal/config"
)

// A pair breaker is the circuit breaker of one producer→consumer pair, beside the engines' own:
// a consumer that cannot read one producer's handoffs (vLLM refused their handshake: the NIXL
// compatibility hash, block size or TP differ) while both engines serve others is neither
// engine's fault. The blame board finds such a failure to be the pair's (BlamePair); the pair's
// breaker then opens at once — a refused handshake is refused again until someone changes an
// engine — and placement never pairs the two while it is open. Neither engine's breaker counts
// the failure. A probe transfer of that pair alone closes it, on the engines' probe cadence
// (recovery.probe_interval_s, doubling to recovery.probe_max_interval_s after each failed
// probe).

// PairKey names a producer→consumer pair by its engines' names.
type PairKey struct{ Producer, Consumer string }

// PairState is where a pair stands; a pair with no breaker open is PairClosed.
type PairState uint8

const (
	PairClosed  PairState = iota // placement may pair the two
	PairOpen                     // placement never pairs them; a probe is scheduled
	PairProbing                  // open, with its probe in flight
)

// PairStateNames names every state, in order (the kv_pair_state gauge reports each).
var PairStateNames = [...]string{PairClosed: "closed", PairOpen: "open", PairProbing: "probing"}

func (s PairState) String() string { return PairStateNames[s] }

// PairBreakers are the open pair breakers of a fleet. A plain value with the clock and the
// recovery settings passed into every decision. Writer: the blame board's actor
// (actors/blameboard.go and actors/pairs.go), the only one that decides a failure is a pair's
// and runs pair probes; placement reads what it publishes (placement.Fleet.PublishPairs).
type PairBreakers struct {
	open map[PairKey]*pairBreaker
}

type pairBreaker struct {
	state     PairState
	cause     string
	openedAt  time.Time
	interval  time.Duration
	nextProbe time.Time
}

// PairView is one open pair as it is published and shown.
type PairView struct {
	PairKey
	State     PairState
	Cause     string
	OpenedAt  time.Time
	NextProbe time.Time
}

// NewPairBreakers is a fleet with every pair closed.
func NewPairBreakers() *PairBreakers { return &PairBreakers{open: map[PairKey]*pairBreaker{}} }

// Failed opens k's breaker for cause, its first probe one probe interval on. It reports whether
// the breaker just opened (a pair open already keeps its cause and cadence).
func (p *PairBreakers) Failed(k PairKey, now time.Time, cause string, cfg config.RecoveryRuntime) (openedNow bool) {
	if _, ok := p.open[k]; ok {
		return false
	}
	p.open[k] = &pairBreaker{state: PairOpen, cause: cause, openedAt: now, interval: cfg.ProbeInterval,
		nextProbe: now.Add(cfg.ProbeInterval)}
	return true
}

// State is where k stands.
func (p *PairBreakers) State(k PairKey) PairState {
	if b, ok := p.open[k]; ok {
		return b.state
	}
	return PairClosed
}

// Due lists the open pairs whose probe is due at now, in name order, and marks each probing:
// the caller runs their probes and reports each (ProbeSucceeded, ProbeFailed,
// ProbeInconclusive).
func (p *PairBreakers) Due(now time.Time) []PairKey {
	var due []PairKey
	for k, b := range p.open {
		if b.state == PairOpen && !now.Before(b.nextProbe) {
			b.state = PairProbing
			due = append(due, k)
		}
	}
	slices.SortFunc(due, comparePairs)
	return due
}

// NextProbe is when the earliest probe of an open pair falls due (zero: none is scheduled).
func (p *PairBreakers) NextProbe() time.Time {
	var next time.Time
	for _, b := range p.open {
		if b.state == PairOpen && (next.IsZero() || b.nextProbe.Before(next)) {
			next = b.nextProbe
		}
	}
	return next
}

// ProbeSucceeded closes k: the pair transferred.
func (p *PairBreakers) ProbeSucceeded(k PairKey) { delete(p.open, k) }

// ProbeFailed keeps k open for cause and backs its next probe off, doubling up to
// recovery.probe_max_interval_s.
func (p *PairBreakers) ProbeFailed(k PairKey, now time.Time, cause string, cfg config.RecoveryRuntime) {
	if b, ok := p.open[k]; ok {
		b.state, b.cause = PairOpen, cause
		b.interval = min(max(2*b.interval, cfg.ProbeInterval), cfg.ProbeMaxInterval)
		b.nextProbe = now.Add(b.interval)
	}
}

// ProbeInconclusive keeps k open on its cadence: the probe could not run (an engine of the pair
// is out of placement, or busy) and says nothing of the pair.
func (p *PairBreakers) ProbeInconclusive(k PairKey, now time.Time) {
	if b, ok := p.open[k]; ok {
		b.state, b.nextProbe = PairOpen, now.Add(b.interval)
	}
}

// Forget drops the breakers of every pair in which engine takes part (it left the fleet),
// reporting whether any was open.
func (p *PairBreakers) Forget(engine string) (forgot bool) {
	for k := range p.open {
		if k.Producer == engine || k.Consumer == engine {
			delete(p.open, k)
			forgot = true
		}
	}
	return forgot
}

// Open lists the open pairs, in name order.
func (p *PairBreakers) Open() []PairView {
	out := make([]PairView, 0, len(p.open))
	for k, b := range p.open {
		out = append(out, PairView{PairKey: k, State: b.state, Cause: b.cause, OpenedAt: b.openedAt, NextProbe: b.nextProbe})
	}
	slices.SortFunc(out, func(a, b PairView) int { return comparePairs(a.PairKey, b.PairKey) })
	return out
}

func comparePairs(a, b PairKey) int {
	return cmp.Or(cmp.Compare(a.Producer, b.Producer), cmp.Compare(a.Consumer, b.Consumer))
}
