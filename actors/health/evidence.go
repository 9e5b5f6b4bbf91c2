package health

// HandoffFailure is one failed read of a producer's handoff, as the blame board weighs it
// against that producer; C identifies an engine.
type HandoffFailure[C comparable] struct {
	// Consumer is the engine whose decode failed reading the handoff.
	Consumer C
	// ConsumerOut says the consumer is out of placement now (quarantined, ejected, probing,
	// joining or leaving): its failures are explained by its own state and accounted for there.
	ConsumerOut bool
	// FailsEverywhere says the request fails on every engine it meets: it says nothing of
	// the producer.
	FailsEverywhere bool
}

// ProducerSuspect says a producer's handoffs failed on two or more consumers that are in
// placement: the evidence that blames the producer rather than each consumer. A failure of or
// with an engine that is already out never counts against its partner: a consumer the breaker
// (or an operator) took out is the explanation of its own failures, so with one good consumer
// and one out, the good one's failures stay its own.
func ProducerSuspect[C comparable](failures []HandoffFailure[C]) bool {
	var first C
	seen := false
	for _, f := range failures {
		if f.ConsumerOut || f.FailsEverywhere {
			continue
		}
		if !seen {
			first, seen = f.Consumer, true
		} else if f.Consumer != first {
			return true
		}
	}
	return false
}
