package telemetry

import "time"

// The admission queue's metrics per flow (flow_control): tenant is the tenant's label — a listed
// tenant's name, "other" or "anonymous" — and band the band's name, so the series are bounded
// by the configuration.

// FlowWaiting reports how many requests of a tenant wait in a band.
func (m *Metrics) FlowWaiting(tenant, band string, n int) {
	m.gauge("flow_waiting", "tenant", tenant, "band", band).Update(float64(n))
}

// FlowAdmitted counts a request of the flow that waited and was given a slot, and how long it
// waited.
func (m *Metrics) FlowAdmitted(tenant, band string, waited time.Duration) {
	m.counter("flow_admitted", "tenant", tenant, "band", band).Inc(1)
	m.timer("flow_wait_s", "tenant", tenant, "band", band).Record(waited)
}

// FlowRefused counts a request of the flow the queue refused, by reason: shed, queue_full,
// tenant_queue_full, deadline_unmeetable.
func (m *Metrics) FlowRefused(tenant, band, reason string) {
	m.counter("flow_refused", "tenant", tenant, "band", band, "reason", reason).Inc(1)
}

// FlowTokens counts the tokens served to a flow (prompt and completion, as the engine reported
// them) by requests that ended with an answer.
func (m *Metrics) FlowTokens(tenant, band string, tokens int) {
	m.counter("flow_tokens", "tenant", tenant, "band", band).Inc(int64(tokens))
}
