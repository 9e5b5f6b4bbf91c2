package health

// The pair rule of the blame board. A decode that failed reading a producer's handoff is the
// pair's fault — the consumer cannot read this producer's handoffs, as when vLLM refuses their
// handshake — when the failures are confined to the pair while both engines serve others:
//
//   - the request itself committed on another pair: through another producer to the same
//     consumer (the consumer reads others' handoffs), or through the same producer to another
//     consumer (the producer's handoffs are read elsewhere);
//   - in the window, the producer's handoffs failed on no other consumer and the consumer
//     failed nothing else (confinedToPair);
//   - committed through another producer to this consumer, that is evidence enough: the pair's
//     at once (BlamePair). Committed through this producer elsewhere, the consumer must then
//     commit a request too (with some producer: the board cannot tell which, so a pair that
//     failed once and works again may open, and its first probe closes it).
//
// A second request failing on the same pair, with the failures still confined to it, is the
// pair's at once (pairFailedBefore) — even when that request failed on another such pair too
// before it committed. A request that never commits and failed on another engine too is the
// request's before any pair rule is asked (board.go), and so is a held failure once its request
// fails elsewhere: a poison blames no pair. Otherwise the failure is held until the consumer
// commits (BlamePair: the pair's breaker opens, neither engine's counts it), fails something
// else (Count), or the window passes (Count). A consumer that cannot read anyone's handoffs
// never commits, so it is counted as before, at most one window later; a producer whose
// handoffs fail on two consumers is ProducerSuspect's business.

// pairFailedBefore says another request (another fingerprint) failed reading a handoff on l's
// very pair the same way (fault kind and status) within the window, and the failures are
// confined to the pair: two requests are evidence enough, even one that failed on another such
// pair too before it committed.
func (b *Board[E]) pairFailedBefore(l Leg[E], r Report[E]) bool {
	if !l.Transfer() || !b.confinedToPair(l, r.Ends) {
		return false
	}
	for _, rec := range b.recent {
		if rec.fp != r.FP && rec.leg.Transfer() && rec.leg.Engine == l.Engine && rec.leg.Producer == l.Producer &&
			rec.leg.Fault.Kind == l.Fault.Kind && rec.leg.Fault.Status == l.Fault.Status {
			return true
		}
	}
	return false
}

// pairsAtOnce says the transfer failure l of report r is the pair's at once: the request
// committed through another producer to this very consumer.
func (b *Board[E]) pairsAtOnce(l Leg[E], r Report[E]) bool {
	return l.Transfer() && r.Committed && r.Consumer == l.Engine && r.Producer != l.Producer && b.confinedToPair(l, r.Ends)
}

// mayBePairs says the transfer failure l of report r is held as the pair's until the consumer
// shows it serves: the request committed through this producer to another consumer.
func (b *Board[E]) mayBePairs(l Leg[E], r Report[E]) bool {
	return l.Transfer() && r.Committed && r.Producer == l.Producer && r.Consumer != l.Engine && b.confinedToPair(l, r.Ends)
}

// confinedToPair says no failure in the window, nor another end of the request being reported
// (ends), involves l's consumer or l's producer's handoffs other than this pair's transfers.
//
// It is false too when either engine has no other partner in placement: a fleet of one pair
// cannot tell the pair from its engines, and keeping it apart would leave them idle.
func (b *Board[E]) confinedToPair(l Leg[E], ends []Leg[E]) bool {
	if !b.facts.OtherPartners(l.Producer, l.Engine) {
		return false
	}
	for _, rec := range b.recent {
		if !sameSides(l, rec.leg) {
			return false
		}
	}
	for _, o := range ends {
		if !sameSides(l, o) {
			return false
		}
	}
	return true
}

// sameSides says failure o does not set l's pair apart from its engines: it is a transfer of the
// same pair, or involves neither l's consumer nor l's producer's handoffs.
func sameSides[E comparable](l, o Leg[E]) bool {
	switch {
	case o.Transfer() && o.Engine == l.Engine && o.Producer == l.Producer:
		return true
	case o.Engine == l.Engine: // the consumer failed something else
		return false
	case o.Transfer() && o.Producer == l.Producer: // the producer's handoffs failed elsewhere
		return false
	}
	return true
}

// settlePair decides a failure held as the pair's, if it can: the pair's once its consumer
// commits, its consumer's once the failures are not confined to the pair any more.
func (b *Board[E]) settlePair(h *heldFailure[E]) (Verdict, bool) {
	switch {
	case !b.confinedToPair(h.l, nil):
		return Count, true
	case b.facts.Commits(h.l.Engine) > h.commits:
		return BlamePair, true
	}
	return 0, false
}
