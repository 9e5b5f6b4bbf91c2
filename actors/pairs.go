package actors

import (
	"context"
	"time"

	"github.com/asynkron/protoactor-go/actor"

	"github.com/narwhal-router/narwhal/actors/health"
	"github.com/narwhal-router/narwhal/actors/placement"
	"github.com/narwhal-router/narwhal/transport"
	"github.com/narwhal-router/narwhal/transport/fault"
	"github.com/narwhal-router/narwhal/transport/kv"
)

// The pair breakers (health.PairBreakers) belong to the blame board's actor, their one
// writer: it opens a pair's breaker when the board finds a failure to be the pair's
// (BlamePair) or an engine's probe reports a pair that failed where another partner passed
// (pairRefused), probes each open pair on the engines' probe cadence, and publishes the open
// pairs to placement (placement.Fleet.PublishPairs). Every pairSweepEvery it also runs the
// pair probes that are due, forgets the pairs of engines that left, and reports the state of
// every pair whose breaker has opened (kv_pair_state: open, probing, closed again) and how many
// partners each engine can never be paired with because their KV shapes differ
// (kv_incompatible_partners: placement keeps them apart without a breaker).

// pairSweepEvery is how often the pairs are swept at least; a pair probe falling due sooner
// brings the sweep forward.
const pairSweepEvery = time.Second

// pairRefused tells the board's actor that a probe found producer's handoffs unreadable by
// consumer while another partner's passed: the pair's breaker opens.
type pairRefused struct {
	producer, consumer *placement.Engine
	cause              string
}

// pairSweep is the sweep's tick; pairProbed a pair probe's result (err nil: it passed;
// inconclusive: it said nothing of the pair).
type (
	pairSweep  struct{ gen uint64 }
	pairProbed struct {
		key          health.PairKey
		err          error
		inconclusive bool
	}
)

// pairState is the board actor's part for pairs: the breakers and the states last reported.
type pairState struct {
	breakers *health.PairBreakers
	reported map[health.PairKey]string
	// incompatible is each engine's kv_incompatible_partners as last reported.
	incompatible map[string]int
	sweep        *time.Timer // the next sweep's; stopped with the actor
	// gen numbers the sweeps scheduled: only the newest reschedules, so one chain runs.
	gen uint64
}

func (b *blameBoard) startPairs() {
	b.pairs = pairState{breakers: health.NewPairBreakers(), reported: map[health.PairKey]string{}, incompatible: map[string]int{}}
	b.env.fleet.PublishPairs(nil)
	b.schedulePairSweep()
}

func (b *blameBoard) schedulePairSweep() {
	if b.pairs.sweep != nil {
		b.pairs.sweep.Stop()
	}
	wait := pairSweepEvery
	if next := b.pairs.breakers.NextProbe(); !next.IsZero() {
		wait = min(wait, max(time.Until(next), time.Millisecond))
	}
	b.pairs.gen++
	self, root, gen := b.self, b.env.root, b.pairs.gen
	b.pairs.sweep = time.AfterFunc(wait, func() { root.Send(self, pairSweep{gen: gen}) })
}

// receivePairs handles the pair messages; false for any other.
func (b *blameBoard) receivePairs(msg any) bool {
	switch m := msg.(type) {
	case *actor.Stopping:
		if b.pairs.sweep != nil {
			b.pairs.sweep.Stop()
		}
	case pairRefused:
		b.pairFailed(m.producer, m.consumer, m.cause)
	case pairSweep:
		b.sweepPairs()
		if m.gen == b.pairs.gen {
			b.schedulePairSweep()
		}
	case pairProbed:
		b.pairProbed(m)
	default:
		return false
	}
	return true
}

// pairFailed opens the breaker of producer→consumer for cause.
func (b *blameBoard) pairFailed(producer, consumer *placement.Engine, cause string) {
	k := health.PairKey{Producer: producer.Name, Consumer: consumer.Name}
	if b.pairs.breakers.Failed(k, time.Now(), cause, b.env.current().recovery) {
		b.env.log.Warn("KV pair breaker opened: the consumer cannot read this producer's handoffs, while both serve others",
			"producer", k.Producer, "consumer", k.Consumer, "cause", cause)
		b.env.metrics.PairBreakerTransition(k.Producer, k.Consumer, health.PairOpen.String())
		b.publishPairs()
		b.reportPairs(b.env.fleet.Load())
		b.schedulePairSweep() // its probe falls due before the next sweep
	}
}

func (b *blameBoard) publishPairs() {
	b.env.fleet.PublishPairs(b.pairs.breakers.Open())
}

// sweepPairs forgets the pairs of engines gone, starts the probes due, and reports every pair.
func (b *blameBoard) sweepPairs() {
	f := b.env.fleet.Load()
	changed := false
	for _, v := range b.pairs.breakers.Open() {
		for _, name := range []string{v.Producer, v.Consumer} {
			if f.Engine(name) == nil && b.pairs.breakers.Forget(name) {
				changed = true
			}
		}
	}
	for _, k := range b.pairs.breakers.Due(time.Now()) {
		changed = true
		b.probePair(f, k)
	}
	if changed {
		b.publishPairs()
	}
	b.reportPairs(f)
}

// probePair runs one probe transfer of k off the actor; it is inconclusive when either engine
// is gone or out of placement (their own breakers' business), serves no model in common, or
// their KV shapes differ.
func (b *blameBoard) probePair(f *placement.Snapshot, k health.PairKey) {
	p, c := f.Engine(k.Producer), f.Engine(k.Consumer)
	self, root := b.self, b.env.root
	if p == nil || c == nil || !p.Placeable.Load() || !c.Placeable.Load() || !c.Serves(p.FirstModel()) ||
		kv.Mismatch(p.KVShape(), c.KVShape()) != "" { // no use probing a pair known not to fit

		root.Send(self, pairProbed{key: k, inconclusive: true})
		return
	}
	model, legTimeout := p.FirstModel(), b.r.current().Engine.FirstTokenTimeoutS.Duration()
	go func() {
		ctx, cancel := context.WithTimeout(context.Background(), 3*legTimeout)
		defer cancel()
		_, err := transport.ProbeTransfer(ctx, p.Client, c.Client, model, legTimeout)
		// Only the consumer's leg speaks of the pair: a producer whose own prefill fails is its
		// breaker's business.
		f, isFault := fault.As(err)
		root.Send(self, pairProbed{key: k, err: err, inconclusive: isFault && f.Phase == fault.PhasePrefill})
	}()
}

func (b *blameBoard) pairProbed(m pairProbed) {
	now := time.Now()
	switch {
	case m.inconclusive:
		b.pairs.breakers.ProbeInconclusive(m.key, now)
	case m.err == nil:
		b.pairs.breakers.ProbeSucceeded(m.key)
		b.env.log.Info("KV pair breaker closed: a probe of the pair passed", "producer", m.key.Producer, "consumer", m.key.Consumer)
		b.env.metrics.PairBreakerTransition(m.key.Producer, m.key.Consumer, health.PairClosed.String())
	default:
		b.pairs.breakers.ProbeFailed(m.key, now, m.err.Error(), b.env.current().recovery)
		b.env.log.Info("KV pair probe failed", "producer", m.key.Producer, "consumer", m.key.Consumer, "err", m.err)
	}
	b.publishPairs()
	b.reportPairs(b.env.fleet.Load())
	b.schedulePairSweep()
}

// reportPairs reports the pairs (kv_pair_state) and each engine's incompatible partners
// (kv_incompatible_partners). Its cost is linear in the fleet, the open pairs and the pairs
// reported before, never in producers × consumers: a fleet of thousands of engines has
// millions of pairs, which neither this sweep nor a metrics backend could carry.
//
// A pair is reported once its breaker has opened, from then on while both engines are in the
// fleet: open, probing, or closed again (a pair that never failed has no series, which means
// closed). Pairs whose KV shapes differ are counted per engine rather than listed per pair.
func (b *blameBoard) reportPairs(f *placement.Snapshot) {
	report := func(k health.PairKey, st string) {
		if b.pairs.reported[k] != st {
			b.pairs.reported[k] = st
			b.env.metrics.PairState(k.Producer, k.Consumer, st, pairStates)
		}
	}
	for _, v := range b.pairs.breakers.Open() {
		report(v.PairKey, v.State.String())
	}
	for k := range b.pairs.reported {
		if f.Engine(k.Producer) == nil || f.Engine(k.Consumer) == nil {
			// A producer's series leave with it (Metrics.ForgetEngine); a consumer's are zeroed.
			delete(b.pairs.reported, k)
			if f.Engine(k.Producer) != nil {
				b.env.metrics.PairState(k.Producer, k.Consumer, "", pairStates)
			}
			continue
		}
		report(k, b.pairs.breakers.State(k).String())
	}
	b.reportIncompatible(f)
}

// reportIncompatible sets kv_incompatible_partners for every engine that changed: the engines
// of the other role it can never be paired with. Engines are grouped by KV shape first, so
// the work is the fleet times its distinct shapes (a handful).
func (b *blameBoard) reportIncompatible(f *placement.Snapshot) {
	producers, consumers := map[kv.Shape]int{}, map[kv.Shape]int{}
	for _, v := range f.Engines {
		if v.CanServe(fault.PhasePrefill) {
			producers[v.KVShape()]++
		}
		if v.CanServe(fault.PhaseDecode) {
			consumers[v.KVShape()]++
		}
	}
	count := func(shape kv.Shape, others map[kv.Shape]int, mismatch func(kv.Shape, kv.Shape) string) int {
		n := 0
		for other, k := range others {
			if mismatch(shape, other) != "" {
				n += k
			}
		}
		return n
	}
	reversed := func(c, p kv.Shape) string { return kv.Mismatch(p, c) }
	seen := make(map[string]bool, len(f.Engines))
	for _, v := range f.Engines {
		n := 0
		if v.CanServe(fault.PhasePrefill) {
			n += count(v.KVShape(), consumers, kv.Mismatch)
		}
		if v.CanServe(fault.PhaseDecode) {
			n += count(v.KVShape(), producers, reversed)
		}
		seen[v.Name] = true
		if last, ok := b.pairs.incompatible[v.Name]; !ok || last != n {
			b.pairs.incompatible[v.Name] = n
			b.env.metrics.IncompatiblePartners(v.Name, n)
		}
	}
	for name := range b.pairs.incompatible {
		if !seen[name] {
			delete(b.pairs.incompatible, name)
		}
	}
}

// pairStates are the states kv_pair_state reports.
var pairStates = health.PairStateNames[:]
