package telemetry

// PairState reports a producer→consumer pair's state: 1 for current, 0 for the other states
// (closed, open, probing: its pair breaker); current "" zeroes them all (the pair is gone).
func (m *Metrics) PairState(producer, consumer, current string, states []string) {
	for _, st := range states {
		v := 0.0
		if st == current {
			v = 1
		}
		m.gauge("kv_pair_state", "producer", producer, "consumer", consumer, "state", st).Update(v)
	}
}

// IncompatiblePartners reports how many engines of the other role engine can never be paired
// with, because their KV shapes differ.
func (m *Metrics) IncompatiblePartners(engine string, n int) {
	m.gauge("kv_incompatible_partners", "engine", engine).Update(float64(n))
}

// PairBreakerTransition counts a pair breaker opening ("open") or closing ("closed").
func (m *Metrics) PairBreakerTransition(producer, consumer, to string) {
	m.counter("kv_pair_breaker_transitions", "producer", producer, "consumer", consumer, "to", to).Inc(1)
}
