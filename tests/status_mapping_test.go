package tests

import (
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/narwhal-router/narwhal/bench/sim"
	"github.com/narwhal-router/narwhal/config"
)

// The fault table, row by row: what the client sees for each kind of fault before commit (an
// HTTP status and body) and after it (one terminal error event), with one attempt (the default)
// so that no retry hides the mapping.

// mappingHarness is a 1p+1d fleet with short timeouts that never ejects an engine.
func mappingHarness(t *testing.T, more ...func(*config.Config)) *harness {
	return start(t, setup{prefill: 1, decode: 1, engine: sim.Options{Tokens: 4}, config: configs(append([]func(*config.Config){
		timeouts(0.3, 0.3, 0.3),
		func(c *config.Config) { c.Recovery.EjectAfter = 1000 },
	}, more...)...)})
}

func TestStatusMappingBeforeCommit(t *testing.T) {
	h := mappingHarness(t)
	engineError := func(code int, message, typ string) string {
		return `{"error":{"message":"` + message + ` (simulated fault)","type":"` + typ + `","param":null,"code":` + strconv.Itoa(code) + `}}`
	}
	cases := []struct {
		row, name, body string
		status          int
		code            string // the router envelope's code; "" when the engine's body passes through
		message         string // the message's beginning, or the whole engine body
		legs            [2]int
	}{
		{"timeout-shaped", "prefill timeout", "@sim:prefill.hang_headers", 504, "timeout", "prefill engine did not answer within", [2]int{1, 0}},
		{"timeout-shaped", "first-token timeout", "@sim:decode.hang_first_token", 504, "first_token_timeout", "no token from the decode engine within", [2]int{1, 1}},
		{"timeout-shaped", "response headers never come", "@sim:decode.hang_headers", 504, "first_token_timeout", "no token from the decode engine within", [2]int{1, 1}},

		{"other engine fault", "prefill refused", "@sim:prefill.refuse", 502, "unreachable", "could not reach the engine", [2]int{1, 0}},
		{"other engine fault", "decode refused", "@sim:decode.refuse", 502, "unreachable", "could not reach the engine", [2]int{1, 1}},
		{"other engine fault", "prefill 500", "@sim:prefill.status=500", 502, "engine_status", "engine failed (500)", [2]int{1, 0}},
		{"other engine fault", "decode 502", "@sim:decode.status=502", 502, "engine_status", "engine failed (502)", [2]int{1, 1}},
		{"other engine fault", "descriptor without engine identity", "@sim:prefill.bad_descriptor=missing_engine", 502, "invalid_descriptor", "the producer's handoff descriptor failed validation", [2]int{1, 0}},
		{"other engine fault", "descriptor with malformed blocks", "@sim:prefill.bad_descriptor=bad_blocks", 502, "invalid_descriptor", "the producer's handoff descriptor failed validation", [2]int{1, 0}},
		{"other engine fault", "descriptor of another connector", "@sim:prefill.bad_descriptor=wrong_connector", 502, "invalid_descriptor", "the producer's handoff descriptor failed validation", [2]int{1, 0}},
		{"other engine fault", "descriptor with another endpoint", "@sim:prefill.bad_descriptor=wrong_endpoint", 502, "invalid_descriptor", "the producer's handoff descriptor failed validation", [2]int{1, 0}},
		{"other engine fault", "descriptor naming another engine identity", "@sim:prefill.wrong_engine_id", 502, "invalid_descriptor", "the producer's handoff descriptor failed validation", [2]int{1, 0}},

		{"stream closed before [DONE]", "before any token", "@sim:decode.close_after=0", 502, "closed_early", "stream closed before [DONE]", [2]int{1, 1}},
		{"[DONE] before any token", "done first", "@sim:decode.done_first", 502, "done_before_token", "stream ended with [DONE] before any token arrived", [2]int{1, 1}},
		{"error object inside a 200 stream", "5xx", "@sim:decode.error_in_stream=500", 500, "", withheldEngineError(500, "InternalServerError"), [2]int{1, 1}},
		{"error object inside a 200 stream", "4xx", "@sim:decode.error_in_stream=422", 422, "", withheldEngineError(422, "Unprocessable Entity"), [2]int{1, 1}},

		{"engine 4xx", "prefill 400", "@sim:prefill.status=400", 400, "", engineError(400, "Bad Request", "BadRequestError"), [2]int{1, 0}},
		{"engine 4xx", "decode 404", "@sim:decode.status=404", 404, "", engineError(404, "Not Found", "NotFoundError"), [2]int{1, 1}},
		{"engine 4xx", "decode 422", "@sim:decode.status=422", 422, "", engineError(422, "Unprocessable Entity", "Unprocessable Entity"), [2]int{1, 1}},

		{"engine 429/503", "prefill 429", "@sim:prefill.status=429", 503, "backpressure", "engine is overloaded (429)", [2]int{1, 0}},
		{"engine 429/503", "decode 503", "@sim:decode.status=503", 503, "backpressure", "engine is overloaded (503)", [2]int{1, 1}},
	}
	ids := map[string]int{} // request id → status
	for _, tc := range cases {
		t.Run(tc.row+"/"+tc.name, func(t *testing.T) {
			p0, d0 := h.legCounts()
			r := h.send("/v1/completions", completion("hi "+tc.body, true))
			if tc.code != "" {
				expectError(t, r, tc.status, tc.code, tc.message)
			} else if r.status != tc.status || string(r.body) != tc.message {
				t.Fatalf("got %d %s, want %d and the engine's body %s", r.status, r.body, tc.status, tc.message)
			}
			if p1, d1 := h.legCounts(); p1-p0 != tc.legs[0] || d1-d0 != tc.legs[1] {
				t.Fatalf("legs: %d prefill, %d decode; want %v (no retry)", p1-p0, d1-d0, tc.legs)
			}
			if tc.status == 503 && r.header.Get("Retry-After") != "1" {
				t.Fatalf("503 without the engine's Retry-After: %q", r.header.Get("Retry-After"))
			}
			ids[r.id] = tc.status
		})
	}
	for id, l := range h.accessByID(mapKeys(ids)...) {
		if status, ok := ids[id]; ok && (int(num(l["status"])) != status || int(num(l["attempts"])) != 1 || l["outcome"] != "error") {
			t.Errorf("access log %v, want status %d, 1 attempt, outcome error", l, status)
		}
	}
}

func mapKeys[V any](m map[string]V) []string {
	out := make([]string, 0, len(m))
	for k := range m {
		out = append(out, k)
	}
	return out
}

// A consumer that cannot load the KV cache (the producer advertised an identity it does not
// own, and none is pinned to catch it earlier) fails the decode leg with a 5xx: an engine
// failure, 502.
func TestKVLoadFailureIs502(t *testing.T) {
	h := mappingHarness(t, func(c *config.Config) {
		for i := range c.Engines {
			c.Engines[i].KV.EngineID = ""
		}
	})
	r := h.send("/v1/completions", completion("hi @sim:prefill.wrong_engine_id", true))
	expectError(t, r, 502, "engine_status", "engine failed (500)")
	h.expectLegs(1, 1)
	if s := h.simEngine("d0").Stats(); s.KVLoadFailures != 1 {
		t.Fatalf("kv load failures %d", s.KVLoadFailures)
	}
}

// handoff.max_age_s: a handoff older than that when the decode would start is a transient
// producer fault (502), and no decode request is sent with it.
func TestStaleHandoffIs502(t *testing.T) {
	h := mappingHarness(t, func(c *config.Config) { c.Handoff.MaxAgeS = 0.1 })
	r := h.send("/v1/completions", completion("hi @sim:prefill.slow_first_token=200", true))
	expectError(t, r, 502, "stale_handoff", "the handoff is ")
	if e := envelope(t, r.body); !strings.Contains(e.Message, "older than handoff.max_age_s (100ms)") {
		t.Fatalf("message %q", e.Message)
	}
	h.expectAccess(r.id, 502, 1, "stale_handoff")
	h.expectLegs(1, 0)
}

// handoff.on_missing: fail turns a producer answer without a descriptor into a 502; the
// default, recompute, decodes without one.
func TestMissingDescriptor(t *testing.T) {
	t.Run("fail", func(t *testing.T) {
		h := mappingHarness(t, func(c *config.Config) { c.Handoff.OnMissing = config.OnMissingFail })
		r := h.send("/v1/completions", completion("hi @sim:prefill.bad_descriptor=null", true))
		expectError(t, r, 502, "missing_descriptor", "the producer returned no handoff descriptor")
		h.expectLegs(1, 0)
	})
	t.Run("recompute", func(t *testing.T) {
		h := mappingHarness(t)
		r := h.send("/v1/completions", completion("hi @sim:prefill.bad_descriptor=null", true))
		expectDone(t, r)
		h.expectLegs(1, 1)
	})
}

// Backpressure is load, not failure: the engine's breaker learns nothing from it.
func TestBackpressureDoesNotCountAgainstTheEngine(t *testing.T) {
	h := mappingHarness(t, func(c *config.Config) { c.Recovery.EjectAfter = 1 })
	for _, fault := range []string{"@sim:prefill.status=429", "@sim:decode.status=503", "@sim:decode.status=429"} {
		r := h.send("/v1/completions", completion("hi "+fault, true))
		if r.status != 503 || r.header.Get("Retry-After") == "" {
			t.Fatalf("%s: %d %s", fault, r.status, r.body)
		}
	}
	r := h.send("/v1/completions", completion("hi", true))
	expectDone(t, r)
	for _, e := range []string{"p0", "d0"} {
		if st := h.engine(e); st.State != "admitted" || st.Streak != 0 {
			t.Fatalf("engine %s after backpressure: %+v", e, st)
		}
	}
}

// No admitted engine for a role, or no room within admission.queue_timeout_s: 503 with
// Retry-After, and no engine sees the request.
func TestNoEngineIs503WithRetryAfter(t *testing.T) {
	t.Run("no admitted engine", func(t *testing.T) {
		h := mappingHarness(t, func(c *config.Config) { c.Recovery.ProbeIntervalS, c.Recovery.ProbeMaxIntervalS = 30, 30 })
		h.simEngine("d0").SetDead(true) // so that no health check readmits it
		if code, body := h.adminDo("POST", "/engines/d0/eject"); code != 200 {
			t.Fatalf("eject: %d %s", code, body)
		}
		eventually(t, 2*time.Second, func() bool { s := h.engine("d0").State; return s == "ejected" || s == "probing" },
			func() string { return "d0 is " + h.engine("d0").State })
		r := h.send("/v1/completions", completion("hi", true))
		expectError(t, r, 503, "no_engine", "no admitted engine can run the decode leg")
		if r.header.Get("Retry-After") == "" {
			t.Fatal("503 without Retry-After")
		}
		h.expectLegs(0, 0)
	})
	t.Run("queue timeout", func(t *testing.T) {
		h := mappingHarness(t, maxInflight(1), func(c *config.Config) {
			c.Admission.QueueTimeoutS = 0.3
			c.Engine.FirstTokenTimeoutS = 10
		})
		occupant, occResp, hangUp := h.startRequest("/v1/completions", completion("hi @sim:decode.hang_first_token", true))
		eventually(t, 2*time.Second, func() bool { return h.requestPhase(occupant) == "decode" },
			func() string { return "the first request never reached its decode leg" })
		r := h.send("/v1/completions", completion("hi", true))
		expectError(t, r, 503, "queue_timeout", "no engine had room within admission.queue_timeout_s")
		if r.header.Get("Retry-After") == "" {
			t.Fatal("503 without Retry-After")
		}
		expectElapsed(t, r, 300*time.Millisecond)
		hangUp()
		if resp := <-occResp; resp != nil {
			resp.Body.Close()
		}
		h.expectLegs(1, 1)
	})
}

// After commit every failure is one terminal error event and no [DONE], whatever its row.
func TestStatusMappingAfterCommit(t *testing.T) {
	h := mappingHarness(t, deadline(2))
	cases := []struct {
		name, fault, code, message string
	}{
		{"silence (timeout-shaped)", "@sim:decode.silence_after=2", "silence", "engine went silent between tokens"},
		{"connection reset (engine fault)", "@sim:decode.close_after=2", "closed_early", "stream closed before [DONE]"},
		{"error object, 5xx", "@sim:decode.error_in_stream=503@2", "503", "engine reported an error (stream_error, status 503)"},
		{"error object, 4xx", "@sim:decode.error_in_stream=400@2", "400", "engine reported an error (stream_error, status 400)"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			r := h.send("/v1/chat/completions", chat("hi "+tc.fault, true))
			expectTerminalError(t, r, 2, tc.code, tc.message)
			l := h.accessLine(r.id)
			if int(num(l["status"])) != 200 || l["outcome"] != "stream_error" || int(num(l["output_tokens"])) != 2 {
				t.Fatalf("access log %v", l)
			}
		})
	}
	t.Run("deadline", func(t *testing.T) {
		h := mappingHarness(t, deadline(0.5), timeouts(10, 10, 0))
		r := h.send("/v1/chat/completions", chat("hi @sim:decode.silence_after=2", true))
		expectTerminalError(t, r, 2, "deadline_exceeded", "the request deadline passed")
	})
}
