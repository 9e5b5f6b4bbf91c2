package actors

import (
	"time"

	"github.com/narwhal-router/narwhal/transport/ingress"
)

// Rejected writes the access-log line of a request ingress answered itself, before any
// supervisor (a missing key, a malformed body or header): every request gets one line.
func (r *Router) Rejected(m ingress.Rejected) {
	if r.env.access == nil {
		return
	}
	outcome := outcomeRejected
	if m.Status < 400 { // answered by the listener itself (count_tokens)
		outcome = outcomeSuccess
	}
	r.env.access.write(&accessLine{
		Time: m.Arrival.Add(m.Total).UTC().Format(time.RFC3339Nano), RequestID: m.ID,
		Endpoint: m.Endpoint, Status: m.Status, Outcome: outcome,
		Total: m.Total.Seconds(), ErrorKind: m.Code,
	})
}
