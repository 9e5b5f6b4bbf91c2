package health

// HandoffFailure is one failed read of a producer's handoff, as the blame board weighs it
// against that producer.
type HandoffFailure struct {
	// Consumer names the engine whose decode failed reading the handoff.
	Consumer string
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
func ProducerSuspect(failures []HandoffFailure) bool {
	first := ""
	for _, f := range failures {
		if f.ConsumerOut || f.FailsEverywhere {
			continue
		}
		if first == "" {
			first = f.Consumer
		} else if f.Consumer != first {
			return true
		}
	}
	return false
}
