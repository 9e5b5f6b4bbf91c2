package tests

import (
	"testing"
	"time"

	"github.com/narwhal-router/narwhal/bench/sim"
	"github.com/narwhal-router/narwhal/config"
)

// Each timeout bounds exactly its own stretch of a request, and its expiry is a 504
// before commit (a terminal error event after it). Timeouts are fractions of a second; the
// assertions only check that a timeout did not fire early and did fire (well) before the
// test's patience ran out.

// slack is how late a timeout may fire on a loaded 2-core CI machine running the suite with
// -race and parallel tests (seen: 1.7 s late once, under a load average of 7).
const slack = 3 * time.Second

func expectElapsed(t *testing.T, r result, atLeast time.Duration) {
	t.Helper()
	if r.elapsed < atLeast || r.elapsed > atLeast+slack {
		t.Fatalf("answered after %v, want after %v (and not much later)", r.elapsed, atLeast)
	}
}

func TestPrefillThatNeverAnswersIs504AfterPrefillTimeout(t *testing.T) {
	for _, fault := range []string{"prefill.hang_headers", "prefill.slow_first_token=5000"} {
		t.Run(fault, func(t *testing.T) {
			t.Parallel()
			h := start(t, setup{prefill: 1, decode: 1, config: timeouts(0.3, 10, 10)})
			r := h.send("/v1/completions", completion("hi @sim:"+fault, true))
			expectError(t, r, 504, "timeout", "prefill engine did not answer within 300ms")
			expectElapsed(t, r, 300*time.Millisecond)
			h.expectAccess(r.id, 504, 1, "timeout")
			h.expectLegs(1, 0)
			h.expectAborted("p0", 1, time.Second) // the router hung up, so the engine freed the sequence
		})
	}
}

// engine.first_token_timeout_s starts before the decode request is sent: a decode whose
// response headers are late has that much less time for its first token, and metadata (keep-
// alive comments, the chat role delta) does not stop the clock; only a generated token does.
func TestFirstTokenTimeoutStartsBeforeTheDecodeRequest(t *testing.T) {
	const budget = 400 * time.Millisecond
	cases := []struct {
		name, path, body string
		ok               bool
	}{
		{"no response headers", "/v1/completions", completion("hi @sim:decode.hang_headers", true), false},
		{"headers but no token", "/v1/completions", completion("hi @sim:decode.hang_first_token", true), false},
		{"late headers then a late token add up", "/v1/completions",
			completion("hi @sim:decode.slow_headers=250 @sim:decode.slow_first_token=250", true), false},
		{"late headers alone fit the budget", "/v1/completions", completion("hi @sim:decode.slow_headers=150", true), true},
		{"keep-alive comments are not a token", "/v1/completions",
			completion("hi @sim:decode.hang_first_token @sim:decode.keepalive=50", true), false},
		{"the chat role delta is not a token", "/v1/chat/completions", chat("hi @sim:decode.silence_after=0", true), false},
		{"non-streaming client", "/v1/completions", completion("hi @sim:decode.hang_first_token", false), false},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			h := start(t, setup{prefill: 1, decode: 1, engine: sim.Options{Tokens: 3}, config: timeouts(10, budget.Seconds(), 10)})
			r := h.send(tc.path, tc.body)
			if tc.ok {
				if r.status != 200 {
					t.Fatalf("status %d: %s", r.status, r.body)
				}
				h.expectAccess(r.id, 200, 1, "")
				return
			}
			expectError(t, r, 504, "first_token_timeout", "no token from the decode engine within 400ms")
			expectElapsed(t, r, budget)
			h.expectAccess(r.id, 504, 1, "first_token_timeout")
			h.expectLegs(1, 1)
			h.expectAborted("d0", 1, time.Second)
		})
	}
}

// Once the first token is in, the first-token timeout no longer applies: a stream that takes
// far longer than it in total, with gaps under the read timeout, completes.
func TestSlowStreamOutlivesTheFirstTokenTimeout(t *testing.T) {
	h := start(t, setup{prefill: 1, decode: 1, engine: sim.Options{Tokens: 5, ITL: 120 * time.Millisecond},
		config: timeouts(10, 0.25, 0.5)})
	r := h.send("/v1/completions", completion("hi", true))
	if o := expectDone(t, r); o.text != expectedText(5) {
		t.Fatalf("text %q", o.text)
	}
	if r.elapsed < 480*time.Millisecond {
		t.Fatalf("the stream took %v; the test needs it to outlast the first-token timeout", r.elapsed)
	}
}

// After the first token, engine.decode_read_timeout_s bounds the silence between chunks: a
// 504 whose detail begins "engine went silent between tokens", as a terminal event once the
// stream is committed.
func TestSilenceBetweenTokens(t *testing.T) {
	const read = 250 * time.Millisecond
	cfg := timeouts(10, 10, read.Seconds())
	t.Run("streaming completions", func(t *testing.T) {
		h := start(t, setup{prefill: 1, decode: 1, config: cfg})
		r := h.send("/v1/completions", completion("hi @sim:decode.silence_after=2", true))
		o := expectTerminalError(t, r, 2, "silence", "engine went silent between tokens")
		if o.err.Type != "gateway_timeout" {
			t.Fatalf("terminal event type %q", o.err.Type)
		}
		expectElapsed(t, r, read)
		h.expectAccess(r.id, 200, 1, "silence")
		h.expectLegs(1, 1)
		h.expectAborted("d0", 1, time.Second)
	})
	t.Run("streaming chat", func(t *testing.T) {
		h := start(t, setup{prefill: 1, decode: 1, config: cfg})
		r := h.send("/v1/chat/completions", chat("hi @sim:decode.silence_after=3", true))
		expectTerminalError(t, r, 3, "silence", "engine went silent between tokens")
		h.expectAccess(r.id, 200, 1, "silence")
	})
	t.Run("non-streaming", func(t *testing.T) {
		h := start(t, setup{prefill: 1, decode: 1, config: cfg})
		r := h.send("/v1/completions", completion("hi @sim:decode.silence_after=2", false))
		expectError(t, r, 504, "silence", "engine went silent between tokens")
		h.expectAccess(r.id, 504, 1, "silence")
		h.expectAborted("d0", 1, time.Second)
	})
}

// Metadata chunks reset the silence timer: a stream whose tokens are further apart than
// decode_read_timeout_s survives as long as the engine sends keep-alive comments in between,
// and dies without them.
func TestKeepAliveCommentsResetTheSilenceTimer(t *testing.T) {
	h := start(t, setup{admit: true, prefill: 1, decode: 1, engine: sim.Options{Tokens: 3, ITL: 300 * time.Millisecond},
		config: timeouts(10, 10, 0.2)})
	r := h.send("/v1/completions", completion("hi @sim:decode.keepalive=50", true))
	if o := expectDone(t, r); o.text != expectedText(3) {
		t.Fatalf("text %q", o.text)
	}
	r = h.send("/v1/completions", completion("hi", true))
	expectTerminalError(t, r, 1, "silence", "engine went silent between tokens")
}

// decode_read_timeout_s: 0 leaves a committed stream to the request deadline alone: a silent
// stream ends at the deadline (504 deadline_exceeded as a terminal event), not before.
func TestZeroReadTimeoutLeavesTheStreamToTheDeadline(t *testing.T) {
	h := start(t, setup{prefill: 1, decode: 1, engine: sim.Options{Tokens: 3, ITL: 200 * time.Millisecond},
		config: configs(timeouts(10, 10, 0), deadline(0.9))})
	r := h.send("/v1/completions", completion("hi", true)) // gaps of 200ms, no read timeout: fine
	expectDone(t, r)
	r = h.send("/v1/completions", completion("hi @sim:decode.silence_after=1", true))
	expectTerminalError(t, r, 1, "deadline_exceeded", "the request deadline passed during the decode leg")
	expectElapsed(t, r, 900*time.Millisecond)
	h.expectAccess(r.id, 200, 1, "deadline_exceeded")
}

// request.deadline_s bounds the whole request, whatever phase it is in, and a client may
// shorten it (never lengthen it) with X-Narwhal-Deadline-S.
func TestRequestDeadlineBoundsEveryPhase(t *testing.T) {
	const limit = 400 * time.Millisecond
	cases := []struct {
		name, body, deadlineHeader string
		committed                  bool
		message                    string
		decodeLegs                 int
	}{
		{"prefill", completion("hi @sim:prefill.hang_headers", true), "", false, "the request deadline passed during the prefill leg", 0},
		{"waiting for the first token", completion("hi @sim:decode.hang_first_token", true), "", false,
			"the request deadline passed during the decode leg", 1},
		{"streaming", completion("hi @sim:decode.silence_after=2", true), "", true, "the request deadline passed during the decode leg", 1},
		{"non-streaming after tokens", completion("hi @sim:decode.silence_after=2", false), "", false,
			"the request deadline passed during the decode leg", 1},
		{"a client may shorten it", completion("hi @sim:decode.hang_first_token", true), "0.4", false, "the request deadline passed", 1},
		{"a client may not lengthen it", completion("hi @sim:decode.hang_first_token", true), "30", false, "the request deadline passed", 1},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			cfgDeadline := limit.Seconds()
			if tc.deadlineHeader == "0.4" {
				cfgDeadline = 30
			}
			h := start(t, setup{prefill: 1, decode: 1, config: configs(timeouts(10, 10, 10), deadline(cfgDeadline))})
			var headers []string
			if tc.deadlineHeader != "" {
				headers = []string{"X-Narwhal-Deadline-S", tc.deadlineHeader}
			}
			r := h.send("/v1/completions", tc.body, headers...)
			if tc.committed {
				expectTerminalError(t, r, 2, "deadline_exceeded", tc.message)
				h.expectAccess(r.id, 200, 1, "deadline_exceeded")
			} else {
				expectError(t, r, 504, "deadline_exceeded", tc.message)
				h.expectAccess(r.id, 504, 1, "deadline_exceeded")
			}
			expectElapsed(t, r, limit)
			h.expectLegs(1, tc.decodeLegs) // the deadline is never retried
		})
	}
}

// A request waiting in the admission queue is answered 504 when its deadline passes before an
// engine frees a slot.
func TestRequestDeadlineWhileQueued(t *testing.T) {
	h := start(t, setup{prefill: 1, decode: 1, config: configs(maxInflight(1), timeouts(10, 10, 10), func(c *config.Config) {
		c.Admission.QueueTimeoutS = 10
	})})
	occupant, occResp, hangUp := h.startRequest("/v1/completions", completion("hi @sim:decode.hang_first_token", true))
	eventually(t, 2*time.Second, func() bool { return h.requestPhase(occupant) == "decode" },
		func() string { return "the first request never reached its decode leg" })

	r := h.send("/v1/completions", completion("hi", true), "X-Narwhal-Deadline-S", "0.3")
	expectError(t, r, 504, "deadline_exceeded", "the request deadline passed while waiting for an engine")
	expectElapsed(t, r, 300*time.Millisecond)
	h.expectAccess(r.id, 504, 1, "deadline_exceeded")

	hangUp()
	if resp := <-occResp; resp != nil {
		resp.Body.Close()
	}
	h.expectAborted("d0", 1, time.Second)
	h.expectLegs(1, 1) // the queued request never reached an engine
}
