package health

// The pair rule of the blame board. A decode that failed reading a producer's handoff is the
// pair's fault — the consumer cannot read this producer's handoffs, as when vLLM refuses their
// handshake — when the failures are confined to the pair while both engines serve others:
//
//   - the producer's handoffs are readable (it committed since its first failed handoff in the
//     window, or this very request committed through it on another consumer), or a held
//     handoff failure's producer commits elsewhere;
//   - in the window, the producer's handoffs failed on no other consumer and the consumer
//     failed nothing else (confinedToPair);
//   - the consumer then commits a request (with another producer: BlamePair).
//
// A second request failing on the same pair, with the failures still confined to it, is the
// pair's at once (pairFailedBefore) — even when that request failed on another such pair too,
// which would otherwise look like a request failing everywhere. Otherwise the failure is held
// until the consumer commits (BlamePair: the pair's breaker opens, neither
// engine's counts it), fails something else (Count), or the window passes (Count). A consumer
// that cannot read anyone's handoffs never commits, so it is counted as before, at most one
// window later; a producer whose handoffs fail on two consumers is ProducerSuspect's business.

// pairFailedBefore says another request (another fingerprint) failed reading a handoff on l's
// very pair within the window, and the failures are confined to the pair: two requests are
// evidence enough, even one that failed on another such pair too.
func (b *Board[E]) pairFailedBefore(l Leg[E], fp uint64) bool {
	if !l.Transfer() || !b.confinedToPair(l) {
		return false
	}
	for _, rec := range b.recent {
		if rec.fp != fp && rec.leg.Transfer() && rec.leg.Engine == l.Engine && rec.leg.Producer == l.Producer {
			return true
		}
	}
	return false
}

// mayBePairs says the transfer failure l of report r is held as the pair's until the consumer
// shows it serves other producers.
func (b *Board[E]) mayBePairs(l Leg[E], r Report[E]) bool {
	return l.Transfer() && (b.handoffsWork(l.Producer) || r.Committed && r.Producer == l.Producer) && b.confinedToPair(l)
}

// confinedToPair says no failure in the window involves l's consumer or l's producer's handoffs
// other than this pair's transfers.
func (b *Board[E]) confinedToPair(l Leg[E]) bool {
	for _, rec := range b.recent {
		samePair := rec.leg.Transfer() && rec.leg.Engine == l.Engine && rec.leg.Producer == l.Producer
		switch {
		case samePair:
		case rec.leg.Engine == l.Engine: // the consumer failed something else
			return false
		case rec.leg.Transfer() && rec.leg.Producer == l.Producer: // the producer's handoffs failed elsewhere
			return false
		}
	}
	return true
}

// settlePair decides a failure held as the pair's, if it can: the pair's once its consumer
// commits, its consumer's once the failures are not confined to the pair any more.
func (b *Board[E]) settlePair(h *heldFailure[E]) (Verdict, bool) {
	switch {
	case !b.confinedToPair(h.l):
		return Count, true
	case b.facts.Commits(h.l.Engine) > h.commits:
		return BlamePair, true
	}
	return 0, false
}
