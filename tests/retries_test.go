package tests

import (
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/narwhal-router/narwhal/bench/sim"
	"github.com/narwhal-router/narwhal/config"
)

// Retries: one attempt by default; with recovery.max_attempts > 1 a fresh attempt —
// fresh backend request IDs, a new prefill leg, a new handoff — starts only before visible
// output, only for a transient fault, only within the request deadline and the retry budget.
// Faults are injected once on an engine (InjectFault count 1), so a retry can succeed.

// retryHarness is a 1p+1d fleet with short timeouts that never ejects an engine.
func retryHarness(t *testing.T, more ...func(*config.Config)) *harness {
	return start(t, setup{prefill: 1, decode: 1, engine: sim.Options{Tokens: 4}, config: configs(append([]func(*config.Config){
		timeouts(0.3, 0.3, 0.3),
		func(c *config.Config) { c.Recovery.EjectAfter = 1000 },
	}, more...)...)})
}

// attemptIDs returns the backend request IDs of the fleet's prefill and decode legs, in order.
func (h *harness) attemptIDs() (prefill, decode []string) {
	for _, r := range h.legs("prefill") {
		prefill = append(prefill, r.Get("X-Request-Id"))
	}
	for _, r := range h.legs("decode") {
		decode = append(decode, r.Get("X-Request-Id"))
	}
	return prefill, decode
}

func TestOneAttemptByDefault(t *testing.T) {
	h := start(t, setup{prefill: 1, decode: 1, engine: sim.Options{Tokens: 4}})
	h.inject("d0", "decode.status=500", 1)
	r := h.send("/v1/completions", completion("hi", true))
	expectError(t, r, 502, "engine_status", "engine failed (500)")
	h.expectAccess(r.id, 502, 1, "engine_status")
	h.expectLegs(1, 1)
}

func TestTransientFaultIsRetriedWithAFreshAttempt(t *testing.T) {
	cases := []struct {
		engine, fault string
		kind          string // the first attempt's fault
		decodeLegs    int    // decode legs in total: 1 when the first attempt never reached the consumer
		more          func(*config.Config)
	}{
		{"p0", "prefill.status=500", "engine_status", 1, nil},
		{"p0", "prefill.refuse", "unreachable", 1, nil},
		{"p0", "prefill.hang_headers", "timeout", 1, nil},
		{"p0", "prefill.bad_descriptor=missing_engine", "invalid_descriptor", 1, nil},
		{"p0", "prefill.bad_descriptor=bad_blocks", "invalid_descriptor", 1, nil},
		{"p0", "prefill.slow_first_token=200", "stale_handoff", 1, func(c *config.Config) { c.Handoff.MaxAgeS = 0.1 }},
		{"d0", "decode.status=500", "engine_status", 2, nil},
		{"d0", "decode.refuse", "unreachable", 2, nil},
		{"d0", "decode.hang_headers", "first_token_timeout", 2, nil},
		{"d0", "decode.hang_first_token", "first_token_timeout", 2, nil},
		{"d0", "decode.close_after=0", "closed_early", 2, nil},
		{"d0", "decode.done_first", "done_before_token", 2, nil},
		{"d0", "decode.error_in_stream=500", "stream_error", 2, nil},
	}
	for _, tc := range cases {
		t.Run(tc.fault, func(t *testing.T) {
			t.Parallel()
			more := []func(*config.Config){retries(2)}
			if tc.more != nil {
				more = append(more, tc.more)
			}
			h := retryHarness(t, more...)
			h.inject(tc.engine, tc.fault, 1)
			r := h.send("/v1/completions", completion("hi", true))
			if o := expectDone(t, r); o.text != expectedText(4) {
				t.Fatalf("text %q", o.text)
			}
			l := h.expectAccess(r.id, 200, 2, tc.kind)
			if l["outcome"] != "success" {
				t.Fatalf("access log %v", l)
			}
			if age := num(l["handoff_age_s"]); tc.kind == "stale_handoff" && (age <= 0 || age >= 0.1) {
				t.Fatalf("the retry's handoff is %vs old: its age did not restart with the new prefill", age)
			}
			h.expectLegs(2, tc.decodeLegs)

			// Fresh backend request IDs per attempt; both legs of the last attempt share one.
			prefills, decodes := h.attemptIDs()
			if prefills[0] == "" || prefills[0] == prefills[1] {
				t.Fatalf("the attempts share backend request id %q", prefills[0])
			}
			if decodes[len(decodes)-1] != prefills[1] {
				t.Fatalf("the last decode leg has backend id %q, its prefill %q", decodes[len(decodes)-1], prefills[1])
			}
			if tc.decodeLegs == 2 && decodes[0] != prefills[0] {
				t.Fatalf("the first decode leg has backend id %q, its prefill %q", decodes[0], prefills[0])
			}
			// New producer ownership: the decode reads the handoff of the second prefill.
			last := h.legs("decode")[len(decodes)-1]
			if !strings.Contains(string(last.Body), `"remote_request_id":"cmpl-`+prefills[1]+`-`) {
				t.Fatalf("the retried decode does not carry the new prefill's handoff: %s", last.Body)
			}
		})
	}
}

// Metadata held before the first token (the chat role delta) is not visible output: a failed
// attempt's held events are dropped, and the client sees the retried attempt's, once.
func TestRetryDoesNotDuplicateHeldMetadata(t *testing.T) {
	h := retryHarness(t, retries(2))
	h.inject("d0", "decode.error_in_stream=500", 1)
	r := h.send("/v1/chat/completions", chat("hi", true))
	o := expectDone(t, r)
	if o.text != expectedText(4) || strings.Count(string(r.body), `"role":"assistant"`) != 1 {
		t.Fatalf("stream %q", r.body)
	}
	h.expectAccess(r.id, 200, 2, "stream_error")
}

func TestRetriesStopAtMaxAttempts(t *testing.T) {
	h := retryHarness(t, retries(3))
	h.inject("d0", "decode.status=500", 10)
	r := h.send("/v1/completions", completion("hi", true))
	expectError(t, r, 502, "engine_status", "engine failed (500)")
	h.expectAccess(r.id, 502, 3, "engine_status")
	h.expectLegs(3, 3)
}

// Once a token reached the client, a failure ends the stream with one terminal event: no new
// attempt, no token sent twice.
func TestNoRetryAfterCommit(t *testing.T) {
	for _, fault := range []string{"decode.close_after=2", "decode.silence_after=2", "decode.error_in_stream=500@2"} {
		t.Run(fault, func(t *testing.T) {
			t.Parallel()
			h := retryHarness(t, retries(3))
			h.inject("d0", fault, 1)
			r := h.send("/v1/completions", completion("hi", true))
			o := readStream(t, r.body)
			if r.status != 200 || o.err == nil || o.text != expectedText(2) || o.tokens != 2 {
				t.Fatalf("want 2 tokens, once, then one terminal error; got %d %q", r.status, r.body)
			}
			h.expectLegs(1, 1)
			if l := h.accessLine(r.id); int(num(l["attempts"])) != 1 || l["outcome"] != "stream_error" {
				t.Fatalf("access log %v", l)
			}
		})
	}
}

// The engine's 4xx is the client's problem: passed through, never retried.
func TestNoRetryForClientErrors(t *testing.T) {
	for _, tc := range []struct {
		engine, fault string
		status        int
		legs          [2]int
	}{
		{"p0", "prefill.status=400", 400, [2]int{1, 0}},
		{"d0", "decode.status=422", 422, [2]int{1, 1}},
		{"d0", "decode.error_in_stream=400", 400, [2]int{1, 1}},
	} {
		t.Run(tc.fault, func(t *testing.T) {
			t.Parallel()
			h := retryHarness(t, retries(3))
			h.inject(tc.engine, tc.fault, 1)
			r := h.send("/v1/completions", completion("hi", true))
			if r.status != tc.status || envelope(t, r.body).code() != strconv.Itoa(tc.status) {
				t.Fatalf("got %d %s", r.status, r.body)
			}
			h.expectLegs(tc.legs[0], tc.legs[1])
			if l := h.accessLine(r.id); int(num(l["attempts"])) != 1 {
				t.Fatalf("access log %v", l)
			}
		})
	}
}

// recovery.retry_budget: retries may add at most ratio × recent requests plus min_per_s; past
// that, the fault is the answer.
func TestRetryBudget(t *testing.T) {
	budget := func(ratio, minPerS float64) func(*config.Config) {
		return func(c *config.Config) {
			c.Recovery.MaxAttempts = 3
			c.Recovery.RetryBudget = config.RetryBudget{Ratio: ratio, MinPerS: minPerS, WindowS: 10}
		}
	}
	t.Run("exhausted", func(t *testing.T) {
		h := retryHarness(t, budget(0, 0.01))
		h.inject("d0", "decode.status=500", 1)
		r := h.send("/v1/completions", completion("hi", true))
		expectError(t, r, 502, "engine_status", "engine failed (500)")
		h.expectAccess(r.id, 502, 1, "engine_status")
		h.expectLegs(1, 1)
	})
	t.Run("one retry in the window", func(t *testing.T) {
		h := retryHarness(t, budget(0, 0.1)) // 0.1/s over a 10s window: one retry
		h.inject("d0", "decode.status=500", 1)
		r := h.send("/v1/completions", completion("hi", true))
		expectDone(t, r)
		h.expectAccess(r.id, 200, 2, "engine_status")

		h.inject("d0", "decode.status=500", 1)
		r = h.send("/v1/completions", completion("hi", true))
		expectError(t, r, 502, "engine_status", "engine failed (500)")
		h.expectAccess(r.id, 502, 1, "engine_status")
	})
	t.Run("ratio of recent requests", func(t *testing.T) {
		h := retryHarness(t, budget(0.5, 0))
		for i := 0; i < 3; i++ { // three requests earn one and a half retries
			expectDone(t, h.send("/v1/completions", completion("hi", true)))
		}
		h.inject("d0", "decode.status=500", 1)
		r := h.send("/v1/completions", completion("hi", true)) // four requests: two retries allowed
		expectDone(t, r)
		h.expectAccess(r.id, 200, 2, "engine_status")
		h.inject("d0", "decode.status=500", 1)
		r = h.send("/v1/completions", completion("hi", true)) // five requests, 2.5: one more
		expectDone(t, r)
		h.inject("d0", "decode.status=500", 1)
		r = h.send("/v1/completions", completion("hi", true)) // six requests, 3: one more
		expectDone(t, r)
		h.inject("d0", "decode.status=500", 1)
		r = h.send("/v1/completions", completion("hi", true)) // seven requests, 3.5: none left
		expectError(t, r, 502, "engine_status", "engine failed (500)")
	})
}

// request.deadline_s bounds retries too: no attempt starts after it, and the request ends by it.
func TestDeadlineStopsRetries(t *testing.T) {
	const limit = 750 * time.Millisecond
	h := retryHarness(t, retries(10), deadline(limit.Seconds()))
	h.inject("d0", "decode.hang_first_token", 0)
	r := h.send("/v1/completions", completion("hi", true))
	if r.status != 504 {
		t.Fatalf("status %d: %s", r.status, r.body)
	}
	expectElapsed(t, r, limit)
	l := h.accessLine(r.id)
	attempts := int(num(l["attempts"]))
	if attempts < 2 || attempts > 3 {
		t.Fatalf("%d attempts within a %v deadline and 300ms first-token timeouts: %v", attempts, limit, l)
	}
	if k := str(l["error_kind"]); k != "deadline_exceeded" && k != "first_token_timeout" {
		t.Fatalf("error kind %q", k)
	}
	h.quiesced()
	// Every attempt but the last ran both legs; how far the last got before the deadline cut
	// it depends on the machine's speed (its prefill, or its decode leg, may never be sent).
	if p, d := h.legCounts(); p < attempts-1 || p > attempts || d < attempts-1 || d > p {
		t.Fatalf("the fleet saw %d prefill and %d decode legs for %d attempts", p, d, attempts)
	}
	arrival := time.Now().Add(-r.elapsed)
	for _, leg := range h.legs("decode") {
		if !leg.At.Before(arrival.Add(limit)) {
			t.Fatalf("a decode leg started %v after the request arrived, past its deadline", leg.At.Sub(arrival))
		}
	}
}

// A retry prefers other engines than the one that failed: every request succeeds, and each
// one whose first attempt met the broken engine ran its second elsewhere.
func TestRetryAvoidsTheEngineThatFailed(t *testing.T) {
	for _, tc := range []struct {
		name            string
		prefill, decode int
		broken, fault   string
		other, role     string
	}{
		{"consumer", 1, 2, "d0", "decode.status=500", "d1", "consumer"},
		{"producer", 2, 1, "p0", "prefill.status=500", "p1", "producer"},
		{"consumer pushing back", 1, 2, "d0", "decode.status=429", "d1", "consumer"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			h := start(t, setup{prefill: tc.prefill, decode: tc.decode, engine: sim.Options{Tokens: 2},
				config: configs(retries(2), routingHeaders, func(c *config.Config) { c.Recovery.EjectAfter = 1000 })})
			h.inject(tc.broken, tc.fault, 0)
			retried := 0
			for i := 0; i < 20; i++ {
				r := h.send("/v1/completions", completion("hi", true))
				expectDone(t, r)
				if got := r.header.Get("x-narwhal-" + tc.role); got != tc.other {
					t.Fatalf("request served by %s %q, want %s", tc.role, got, tc.other)
				}
				if r.header.Get("x-narwhal-attempts") == "2" {
					retried++
				}
			}
			st := h.simEngine(tc.broken).Stats()
			if hit := int(st.PrefillRequests + st.DecodeRequests); hit != retried || hit == 0 {
				t.Fatalf("the broken engine got %d legs and %d requests were retried", hit, retried)
			}
			if e := h.engine(tc.broken); strings.Contains(tc.fault, "429") && e.Streak != 0 {
				t.Fatalf("backpressure counted against the engine: %+v", e)
			}
		})
	}
}

// Backpressure with nowhere else to go: 503 with the engine's Retry-After, whatever
// max_attempts allows.
func TestBackpressureWithNoOtherEngineIs503(t *testing.T) {
	for _, attempts := range []int{1, 3} {
		h := retryHarness(t, retries(attempts))
		h.inject("d0", "decode.status=429", 0)
		r := h.send("/v1/completions", completion("hi", true))
		expectError(t, r, 503, "backpressure", "engine is overloaded (429)")
		if ra := r.header.Get("Retry-After"); ra != "1" {
			t.Fatalf("Retry-After %q, want the engine's", ra)
		}
		if d := h.simEngine("d0").Stats().DecodeRequests; d != 1 {
			t.Fatalf("max_attempts %d: the engine that pushed back got %d decode legs", attempts, d)
		}
	}
}
