package tests

import (
	"fmt"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/narwhal-router/narwhal/bench/sim"
	"github.com/narwhal-router/narwhal/config"
)

// An answer larger than server.max_response_bytes is the operator's bound, not the engine's
// failure (response_too_large): the client gets a 502 naming the key, the request is not tried
// on another engine (which would answer just as much), and no breaker moves, so repeating a big
// request cannot eject a healthy fleet.

const tooLargeBound = 2048

// tooLargeConfig allows several attempts and ejects an engine after two counted failures, so a
// bound that were counted or retried would show.
func tooLargeConfig(c *config.Config) {
	retries(3)(c)
	c.Server.MaxResponseBytes = tooLargeBound
	c.Recovery.EjectAfter = 2
}

// expectFleetUntouched checks that every engine is still admitted with no failure streak.
func (h *harness) expectFleetUntouched() {
	h.t.Helper()
	for _, e := range h.adminEngines() {
		if e.State != "admitted" || e.Streak != 0 || e.QuarantineEnds != nil {
			h.t.Fatalf("engine %s: state %s, streak %d, quarantined until %v; want admitted with no streak",
				e.Name, e.State, e.Streak, e.QuarantineEnds)
		}
	}
}

// faultsOfKind sums narwhal_engine_faults_total over engines and legs for one kind.
func (h *harness) faultsOfKind(kind string) float64 {
	h.t.Helper()
	re := regexp.MustCompile(`(?m)^narwhal_engine_faults_total\{[^}]*kind="` + regexp.QuoteMeta(kind) + `"[^}]*\} ([0-9.e+-]+)$`)
	total := 0.0
	for _, m := range re.FindAllStringSubmatch(h.scrape(), -1) {
		v, _ := strconv.ParseFloat(m[1], 64)
		total += v
	}
	return total
}

func (h *harness) expectFaultsOfKind(kind string, want float64) {
	h.t.Helper()
	eventually(h.t, 5*time.Second, func() bool { return h.faultsOfKind(kind) == want }, func() string {
		return fmt.Sprintf("narwhal_engine_faults_total{kind=%q} is %v, want %v", kind, h.faultsOfKind(kind), want)
	})
}

// TestOversizedPassthroughAnswerIsNotAnEngineFailure: a healthy simulated engine answers an
// embeddings batch correctly, but with more than server.max_response_bytes.
func TestOversizedPassthroughAnswerIsNotAnEngineFailure(t *testing.T) {
	h := start(t, setup{prefill: 1, decode: 2, config: tooLargeConfig})
	inputs := make([]string, 64) // about 90 bytes of answer each: some 6 KiB in all
	for i := range inputs {
		inputs[i] = jsonString("w" + strconv.Itoa(i))
	}
	big := `{"model":"sim-model","input":[` + strings.Join(inputs, ",") + `]}`

	// eject_after + 1 of them: were they counted, an engine would be ejected.
	for i := 1; i <= 3; i++ {
		r := h.send("/v1/embeddings", big)
		expectError(t, r, 502, "response_too_large",
			"the engine's answer is larger than server.max_response_bytes ("+strconv.Itoa(tooLargeBound)+" bytes)")
		h.expectAccess(r.id, 502, 1, "response_too_large")
		if n := embeddingRequests(h); n != i {
			t.Fatalf("after %d oversized requests the fleet received %d embeddings requests, want %d (no retry)", i, n, i)
		}
	}
	h.expectFleetUntouched()
	h.expectFaultsOfKind("response_too_large", 3)
	if n := h.metric(`narwhal_retries_total{reason="response_too_large"}`); n != 0 {
		t.Fatalf("%v retries for response_too_large", n)
	}

	// The engines still serve: an answer within the bound reaches the client.
	for i := 0; i < 4; i++ {
		if r := h.send("/v1/embeddings", `{"model":"sim-model","input":"hi"}`); r.status != 200 || !strings.Contains(string(r.body), `"embedding"`) {
			t.Fatalf("a small embeddings request after the oversized ones: %d %s", r.status, r.body)
		}
	}
	h.expectFleetUntouched()
	h.assertNoReservations()
}

// embeddingRequests counts the /v1/embeddings requests the fleet received.
func embeddingRequests(h *harness) int {
	n := 0
	for _, r := range h.legs("other") {
		if r.Path == "/v1/embeddings" {
			n++
		}
	}
	return n
}

// TestOversizedAssembledResponseIsNotAnEngineFailure: a non-streaming chat completion whose
// decode events outgrow server.max_response_bytes while a healthy engine is still generating.
// The router hangs up on the decode leg (the engine counts an aborted generation) and answers
// 502 response_too_large; nothing is retried and no breaker moves.
func TestOversizedAssembledResponseIsNotAnEngineFailure(t *testing.T) {
	// A thousand tokens 2 ms apart: the bound (some twelve chat chunks) is reached long before
	// the engine would end, so the router's hang-up is what ends the generation.
	h := start(t, setup{prefill: 1, decode: 2, engine: sim.Options{Tokens: 1000, ITL: 2 * time.Millisecond}, config: tooLargeConfig})
	aborted := func() int64 {
		n := int64(0)
		for _, e := range h.fleet.Engines {
			n += e.Stats().Aborted
		}
		return n
	}

	for i := 1; i <= 3; i++ {
		r := h.send("/v1/chat/completions", chat("tell me everything", false))
		expectError(t, r, 502, "response_too_large",
			"decode stream is larger than server.max_response_bytes ("+strconv.Itoa(tooLargeBound)+" bytes)")
		h.expectAccess(r.id, 502, 1, "response_too_large")
		h.expectLegs(i, i) // one attempt each: one prefill, one decode
		eventually(t, 5*time.Second, func() bool { return aborted() >= int64(i) }, func() string {
			return fmt.Sprintf("the engines counted %d aborted generations after %d oversized requests", aborted(), i)
		})
	}
	h.expectFleetUntouched()
	h.expectFaultsOfKind("response_too_large", 3)
	if n := h.metric(`narwhal_retries_total{reason="response_too_large"}`); n != 0 {
		t.Fatalf("%v retries for response_too_large", n)
	}

	// The engines still serve: a short non-streaming answer is assembled, and a stream larger
	// than the bound is relayed (the bound is on assembly only).
	r := h.send("/v1/chat/completions", `{"model":"sim-model","max_tokens":2,"messages":[{"role":"user","content":"hi"}]}`)
	if r.status != 200 || !strings.Contains(string(r.body), `"chat.completion"`) {
		t.Fatalf("a short non-streaming chat completion: %d %s", r.status, r.body)
	}
	r = h.send("/v1/chat/completions", `{"model":"sim-model","max_tokens":40,"stream":true,"messages":[{"role":"user","content":"hi"}]}`)
	if out := expectDone(t, r); len(r.body) <= tooLargeBound {
		t.Fatalf("the stream was %d bytes (%+v), want one larger than the bound", len(r.body), out)
	}
	h.expectFleetUntouched()
}
