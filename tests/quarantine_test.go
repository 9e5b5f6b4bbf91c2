package tests

import (
	"testing"
	"time"

	"github.com/narwhal-router/narwhal/bench/sim"
	"github.com/narwhal-router/narwhal/config"
)

// recovery.failure_quarantine_s > 0: an engine that just failed a request is left out of
// placement for that long (while its breaker catches up), then placed again.

func quarantine(s float64) func(*config.Config) {
	return func(c *config.Config) {
		c.Recovery.FailureQuarantineS = config.Seconds(s)
		c.Recovery.EjectAfter = 1000
		c.Server.ExposeRoutingHeaders = true
	}
}

// failOnce sends one request that fails on whichever engine serves its leg and returns that
// engine's name.
func (h *harness) failOnce(directive string) string {
	h.t.Helper()
	r := h.send("/v1/completions", completion("hi "+directive, true))
	expectError(h.t, r, 502, "engine_status", "engine failed (500)")
	return str(h.accessLine(r.id)["error_engine"])
}

func TestFailedEngineIsQuarantined(t *testing.T) {
	for _, tc := range []struct {
		name            string
		prefill, decode int
		directive, role string
	}{
		{"consumer", 1, 2, "@sim:decode.status=500", "consumer"},
		{"producer", 2, 1, "@sim:prefill.status=500", "producer"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			const period = time.Second
			h := start(t, setup{prefill: tc.prefill, decode: tc.decode, engine: sim.Options{Tokens: 1}, config: quarantine(period.Seconds())})
			// The quarantine starts between sending the failing request and seeing the engine
			// quarantined: it must end one period after a moment in that window.
			sentAt := time.Now()
			failed := h.failOnce(tc.directive)
			st := h.waitState(failed, "quarantined", time.Second)
			seenAt := time.Now()
			if st.QuarantineEnds == nil || st.QuarantineEnds.Before(sentAt.Add(period)) || st.QuarantineEnds.After(seenAt.Add(period)) {
				t.Fatalf("quarantine ends %v, want one %v period after the failure (between %v and %v)",
					st.QuarantineEnds, period, sentAt.Add(period), seenAt.Add(period))
			}
			ends := *st.QuarantineEnds

			// While quarantined, nothing is placed on it. A request is placed as soon as it
			// arrives; the margin keeps the last one clear of the quarantine's end on a slow
			// machine.
			checked := 0
			for time.Until(ends) > 150*time.Millisecond {
				r := h.send("/v1/completions", completion("hi", true))
				expectDone(t, r)
				if got := r.header.Get("x-narwhal-" + tc.role); got == failed {
					t.Fatalf("request placed on %s %v before its quarantine ends", failed, time.Until(ends))
				}
				checked++
			}
			if checked == 0 {
				t.Fatalf("no request was sent during the %v quarantine", period)
			}

			// Afterwards it is placed again.
			h.waitState(failed, "admitted", time.Until(ends)+slack)
			for i := 0; ; i++ {
				r := h.send("/v1/completions", completion("hi", true))
				expectDone(t, r)
				if r.header.Get("x-narwhal-"+tc.role) == failed {
					break
				}
				if i == 30 {
					t.Fatalf("%s never placed again after its quarantine", failed)
				}
			}
		})
	}
}

// With the only engine of a role quarantined, requests are turned away (503, Retry-After)
// rather than sent to it, until the quarantine ends.
func TestQuarantinedOnlyEngineTurnsRequestsAway(t *testing.T) {
	h := start(t, setup{prefill: 1, decode: 1, engine: sim.Options{Tokens: 1}, config: quarantine(0.6)})
	if failed := h.failOnce("@sim:decode.status=500"); failed != "d0" {
		t.Fatalf("failed on %q", failed)
	}
	h.waitState("d0", "quarantined", time.Second)
	r := h.send("/v1/completions", completion("hi", true))
	expectError(t, r, 503, "no_engine", "no admitted engine can run the decode leg")
	if r.header.Get("Retry-After") == "" {
		t.Fatal("503 without Retry-After")
	}
	h.waitState("d0", "admitted", 2*time.Second)
	expectDone(t, h.send("/v1/completions", completion("hi", true)))
	if d := h.simEngine("d0").Stats().DecodeRequests; d != 2 {
		t.Fatalf("d0 served %d decode legs, want 2 (none while quarantined)", d)
	}
}

// A retry after a failure does not go back to the quarantined engine when another can serve,
// and with no other engine it answers with the fault that caused the quarantine.
func TestRetryAfterQuarantine(t *testing.T) {
	t.Run("another engine", func(t *testing.T) {
		h := start(t, setup{prefill: 1, decode: 2, engine: sim.Options{Tokens: 2}, config: configs(quarantine(5), retries(2))})
		h.inject("d0", "decode.status=500", 1)
		h.inject("d1", "decode.status=500", 1)
		r := h.send("/v1/completions", completion("hi", true))
		// The first attempt failed on one consumer, which was quarantined; the retry went to the
		// other, whose injected fault made it fail as well.
		expectError(t, r, 502, "engine_status", "engine failed (500)")
		h.expectAccess(r.id, 502, 2, "engine_status")
		h.expectLegs(2, 2)
		h.waitState("d0", "quarantined", time.Second)
		h.waitState("d1", "quarantined", time.Second)
	})
	t.Run("no other engine", func(t *testing.T) {
		h := start(t, setup{prefill: 1, decode: 1, engine: sim.Options{Tokens: 2}, config: configs(quarantine(5), retries(3))})
		h.inject("d0", "decode.status=500", 1)
		r := h.send("/v1/completions", completion("hi", true))
		expectError(t, r, 502, "engine_status", "engine failed (500)")
		h.expectLegs(1, 1)
	})
}

// Quarantine is off by default: a failed engine stays in placement (its breaker counts the
// failure toward ejection).
func TestNoQuarantineByDefault(t *testing.T) {
	h := start(t, setup{prefill: 1, decode: 1, engine: sim.Options{Tokens: 1}})
	h.failOnce("@sim:decode.status=500")
	st := h.engine("d0")
	if st.State != "admitted" || st.QuarantineEnds != nil {
		t.Fatalf("d0 after one failure: %+v", st)
	}
	expectDone(t, h.send("/v1/completions", completion("hi", true)))
}
