package tests

import (
	"io"
	"strings"
	"testing"
	"time"

	"github.com/narwhal-router/narwhal/bench/sim"
	"github.com/narwhal-router/narwhal/config"
)

// A client that hangs up, in whatever phase its request is, gets its engine legs
// aborted within 100 ms (the engine sees the connection close and counts an abort) and every
// reservation released; its request ends with one outcome, client_gone.

// abortWithin is the contract's bound on how fast an engine learns that the client left.
const abortWithin = 100 * time.Millisecond

func TestClientDisconnectAbortsTheEngineLegInEveryPhase(t *testing.T) {
	cases := []struct {
		name string
		path string
		body string
		opts sim.Options
		// phase is the supervisor phase to wait for; engine the engine whose leg must be in
		// flight then, and be aborted after the hang-up.
		phase, engine string
		// tokens is how many generated tokens the client reads before hanging up.
		tokens int
		legs   [2]int // prefill, decode legs the fleet sees in total
	}{
		{name: "prefill that never answers", path: "/v1/completions", body: completion("hi @sim:prefill.hang_headers", true),
			phase: "prefill", engine: "p0", legs: [2]int{1, 0}},
		{name: "slow prefill", path: "/v1/chat/completions", body: chat("hi @sim:prefill.slow_first_token=5000", true),
			phase: "prefill", engine: "p0", legs: [2]int{1, 0}},
		{name: "decode leg sent, no headers yet", path: "/v1/completions", body: completion("hi @sim:decode.hang_headers", true),
			phase: "decode", engine: "d0", legs: [2]int{1, 1}},
		{name: "waiting for the first token", path: "/v1/chat/completions", body: chat("hi @sim:decode.hang_first_token", true),
			phase: "decode", engine: "d0", legs: [2]int{1, 1}},
		{name: "non-streaming, waiting for the first token", path: "/v1/completions",
			body: completion("hi @sim:decode.hang_first_token", false), phase: "decode", engine: "d0", legs: [2]int{1, 1}},
		{name: "silent mid-stream", path: "/v1/completions", body: completion("hi @sim:decode.silence_after=2", true),
			phase: "streaming", engine: "d0", tokens: 2, legs: [2]int{1, 1}},
		{name: "mid-stream while tokens flow", path: "/v1/chat/completions", body: chat("hi", true),
			opts:  sim.Options{Tokens: 100000, ITL: 5 * time.Millisecond, MaxModelLen: 1 << 20},
			phase: "streaming", tokens: 3, legs: [2]int{1, 1}},
		{name: "non-streaming, silent after tokens", path: "/v1/completions",
			body: completion("hi @sim:decode.silence_after=2", false), phase: "streaming", engine: "d0", legs: [2]int{1, 1}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			if tc.engine == "" {
				tc.engine = "d0"
			}
			h := start(t, setup{prefill: 1, decode: 1, engine: tc.opts})
			id, respCh, hangUp := h.startRequest(tc.path, tc.body)
			if tc.tokens > 0 {
				resp := <-respCh
				if resp == nil || resp.StatusCode != 200 {
					t.Fatalf("no stream: %+v", resp)
				}
				readEvents(t, resp.Body, tc.tokens)
				defer resp.Body.Close()
			}
			eventually(t, 3*time.Second, func() bool {
				return h.requestPhase(id) == tc.phase && h.simEngine(tc.engine).Stats().InFlight == 1
			}, func() string {
				return "the request never reached phase " + tc.phase + " with a leg in flight on " + tc.engine
			})

			// Timed from the engine's side (when it saw the connection close), so a test
			// goroutine scheduled late on a loaded machine does not count against the router.
			hungUpAt := time.Now()
			hangUp()
			h.expectAborted(tc.engine, 1, 2*time.Second)
			took := h.simEngine(tc.engine).Stats().LastAbort.Sub(hungUpAt)
			if took > abortWithin {
				t.Errorf("the engine counted the abort %v after the client hung up, want within %v", took, abortWithin)
			}
			status, kind := 0, "client_disconnected" // nothing was sent
			if tc.phase == "streaming" {
				kind = "" // the stream itself was fine
				if strings.Contains(tc.body, `"stream":true`) {
					status = 200 // and committed
				}
			}
			h.expectAccess(id, status, 1, kind)
			if o := str(h.accessLine(id)["outcome"]); o != "client_gone" {
				t.Fatalf("outcome %q, want client_gone", o)
			}
			h.quiesced()
			h.assertNoReservations()
			h.expectLegs(tc.legs[0], tc.legs[1]) // nothing started after the hang-up
		})
	}
}

// A queued request whose client leaves never reaches an engine, and gives up its place in the
// queue: the next waiting request gets the slot as soon as it frees.
func TestClientLeavingTheQueueGivesUpItsPlace(t *testing.T) {
	h := start(t, setup{prefill: 1, decode: 1, engine: sim.Options{Tokens: 2}, config: configs(maxInflight(1), func(c *config.Config) {
		c.Admission.QueueTimeoutS = 5
	})})
	occupant, occResp, releaseOccupant := h.startRequest("/v1/completions", completion("hi @sim:decode.hang_first_token", true))
	eventually(t, 2*time.Second, func() bool { return h.requestPhase(occupant) == "decode" },
		func() string { return "the first request never reached its decode leg" })

	// Freeing the occupant's two slots wakes at most two waiters: requests that left the queue
	// must not be among them.
	for i := 0; i < 3; i++ {
		leaver, _, hangUp := h.startRequest("/v1/completions", completion("hi", true))
		eventually(t, 2*time.Second, func() bool { return h.requestPhase(leaver) == "queued" },
			func() string { return "a request never queued" })
		hangUp()
		if o := str(h.accessLine(leaver)["outcome"]); o != "client_gone" {
			t.Fatalf("outcome %q, want client_gone", o)
		}
	}

	next, nextResp, _ := h.startRequest("/v1/completions", completion("hi", true))
	eventually(t, 2*time.Second, func() bool { return h.requestPhase(next) == "queued" },
		func() string { return "the last request never queued" })
	releaseOccupant()
	if r := <-occResp; r != nil {
		r.Body.Close()
	}

	start := time.Now()
	resp := <-nextResp
	if resp == nil {
		t.Fatal("no response for the request queued behind those that left")
	}
	if resp.StatusCode != 200 {
		b, _ := io.ReadAll(resp.Body)
		t.Fatalf("the request queued behind those that left: %d %s", resp.StatusCode, b)
	}
	resp.Body.Close()
	if waited := time.Since(start); waited > 2*time.Second {
		t.Fatalf("the next request waited %v after the slot freed", waited)
	}
	h.expectAccess(next, 200, 1, "")
	// The requests that left never reached an engine: one leg pair for the occupant, one for next.
	h.expectLegs(2, 2)
}
