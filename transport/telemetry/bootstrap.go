package telemetry

// BootstrapRecheck counts one recheck of a Mooncake producer's cached bootstrap answer, made
// while an attempt planned on it ran, by result: confirmed (the same engine ids), changed (the
// producer restarted: its attempts in flight ended as stale_engine_id and were retried) or
// failed (its bootstrap server did not answer).
func (m *Metrics) BootstrapRecheck(producer, result string) {
	m.counter("kv_bootstrap_rechecks", "producer", producer, "result", result).Inc(1)
}
