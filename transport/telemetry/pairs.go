package telemetry

// PairState reports a producer→consumer pair's state: 1 for current, 0 for the other states
// (closed, open, probing: its pair breaker; incompatible: the engines' KV shapes differ).
func (m *Metrics) PairState(producer, consumer, current string, states []string) {
	for _, st := range states {
		v := 0.0
		if st == current {
			v = 1
		}
		m.gauge("kv_pair_state", "producer", producer, "consumer", consumer, "state", st).Update(v)
	}
}

// PairBreakerTransition counts a pair breaker opening ("open") or closing ("closed").
func (m *Metrics) PairBreakerTransition(producer, consumer, to string) {
	m.counter("kv_pair_breaker_transitions", "producer", producer, "consumer", consumer, "to", to).Inc(1)
}
