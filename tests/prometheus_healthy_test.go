package tests

import (
	"context"
	"fmt"
	"testing"
	"time"
)

// On a healthy fleet — every request served, no fault, no retry, no queue — every panel of the
// Prometheus dashboard shows a number (0 for the errors, retries and queue that did not happen),
// never "No data": an on-call engineer must not have to wonder whether a panel is broken or
// the fleet is fine.
func TestPrometheusDashboardShowsZeroOnAHealthyFleet(t *testing.T) {
	if testing.Short() {
		t.Skip("runs narwhal serve and prometheus")
	}
	rig := startDashboardRig(t)
	ctx := context.Background()
	sent := 0
	for r := range 2 { // two rounds: counters grow between scrapes, so rates are numbers
		for _, body := range []struct{ path, body string }{
			{"/v1/chat/completions", chat("hi", true)},
			{"/v1/completions", completion(fmt.Sprintf("round-%d explain how a disaggregated router moves the prompt's KV cache from the producer to the consumer engine", r), false)},
			{"/v1/chat/completions", chat("shared explain how a disaggregated router moves the prompt's KV cache from the producer to the consumer engine", true)},
		} {
			if code := rig.node.post(ctx, body.path, body.body); code != 200 {
				t.Fatalf("round %d %s: status %d, want 200 on a healthy fleet", r, body.path, code)
			}
			sent++
		}
		eventually(t, 20*time.Second, func() bool { return rig.prom.scalar(`sum(narwhal_requests_total)`) >= float64(sent) },
			func() string {
				return fmt.Sprintf("prometheus has %v requests, want %d", rig.prom.scalar(`sum(narwhal_requests_total)`), sent)
			})
	}
	rig.everyPanelHasData(t)
}
