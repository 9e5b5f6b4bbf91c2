package tests

import (
	"bytes"
	"encoding/json"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/narwhal-router/narwhal/bench/sim"
	"github.com/narwhal-router/narwhal/config"
)

// responsesBody is a /v1/responses body.
func responsesBody(input string, stream bool, more string) string {
	return fmt.Sprintf(`{"model":"sim-model","input":%s,"instructions":"be brief","max_output_tokens":3,"stream":%t%s}`, jsonString(input), stream, more)
}

// respEvent is one typed event of a Responses stream.
type respEvent struct {
	name string // the event: line
	typ  string
	seq  int
	data map[string]any
}

// readResponsesStream parses a Responses stream: every event is "event: <type>" then one data
// line of the same type, numbered 0, 1, 2, ...
func readResponsesStream(t *testing.T, body []byte) []respEvent {
	t.Helper()
	if !bytes.HasSuffix(body, []byte("\n\n")) {
		t.Fatalf("stream does not end at an event boundary: %q", body)
	}
	var out []respEvent
	for _, raw := range strings.Split(strings.TrimSuffix(string(body), "\n\n"), "\n\n") {
		name, data, ok := strings.Cut(raw, "\ndata: ")
		if !ok || !strings.HasPrefix(name, "event: ") || strings.Contains(data, "\n") {
			t.Fatalf("not a typed event: %q", raw)
		}
		var m map[string]any
		if err := json.Unmarshal([]byte(data), &m); err != nil {
			t.Fatalf("event data is not JSON: %q", data)
		}
		ev := respEvent{name: strings.TrimPrefix(name, "event: "), typ: str(m["type"]), seq: int(num(m["sequence_number"])), data: m}
		if ev.name != ev.typ || ev.seq != len(out) {
			t.Fatalf("event %d: %q type %q sequence_number %d", len(out), ev.name, ev.typ, ev.seq)
		}
		out = append(out, ev)
	}
	return out
}

func deltas(evs []respEvent) string {
	var s string
	for _, ev := range evs {
		if ev.typ == "response.output_text.delta" {
			s += str(ev.data["delta"])
		}
	}
	return s
}

func TestResponsesStreamOnThePrefillDecodePath(t *testing.T) {
	h := start(t, setup{prefill: 1, decode: 1, engine: sim.Options{Tokens: 8}, config: routingHeaders})
	r := h.send("/v1/responses", responsesBody("hello there", true, `,"store":false`))
	if r.status != 200 || !strings.HasPrefix(r.header.Get("Content-Type"), "text/event-stream") {
		t.Fatalf("%d %s", r.status, r.body)
	}
	evs := readResponsesStream(t, r.body)
	if evs[0].typ != "response.created" || evs[len(evs)-1].typ != "response.incomplete" {
		t.Fatalf("events %v", evs)
	}
	if got := deltas(evs); got != expectedText(3) {
		t.Fatalf("text %q", got)
	}
	if r.header.Get("x-narwhal-producer") != "p0" || r.header.Get("x-narwhal-consumer") != "d0" {
		t.Fatalf("routing %v", r.header)
	}
	h.expectLegs(1, 1)
	pre, dec := h.legs("prefill")[0], h.legs("decode")[0]
	var pb, db map[string]json.RawMessage
	json.Unmarshal(pre.Body, &pb)
	json.Unmarshal(dec.Body, &db)
	if pre.Path != "/v1/responses" || string(pb["max_output_tokens"]) != "1" || string(pb["stream"]) != "false" ||
		string(pb["store"]) != "false" || !bytes.Contains(pb["kv_transfer_params"], []byte(`"do_remote_decode":true`)) {
		t.Fatalf("prefill leg %s %s", pre.Path, pre.Body)
	}
	if dec.Path != "/v1/responses" || string(db["max_output_tokens"]) != "3" || string(db["stream"]) != "true" ||
		string(db["instructions"]) != `"be brief"` || !bytes.Contains(db["kv_transfer_params"], []byte(`"do_remote_prefill":true`)) {
		t.Fatalf("decode leg %s %s", dec.Path, dec.Body)
	}
	l := h.expectAccess(r.id, 200, 1, "")
	if int(num(l["output_tokens"])) != 3 || str(l["endpoint"]) != "responses" {
		t.Fatalf("access log %v", l)
	}
	if h.simEngine("d0").Stats().KVLoads != 1 {
		t.Fatal("the decode did not load the producer's KV")
	}
}

func TestResponsesNonStreaming(t *testing.T) {
	h := start(t, setup{prefill: 1, decode: 1, engine: sim.Options{Tokens: 2}})
	r := h.send("/v1/responses", `{"model":"sim-model","input":[{"role":"user","content":[{"type":"input_text","text":"hi"}]}]}`)
	var resp struct {
		Object, Status string
		Output         []struct {
			Content []struct{ Type, Text string }
		}
		Usage struct {
			OutputTokens int `json:"output_tokens"`
		}
		KV json.RawMessage `json:"kv_transfer_params"`
	}
	if r.status != 200 || json.Unmarshal(r.body, &resp) != nil || resp.Object != "response" || resp.Status != "completed" ||
		len(resp.Output) != 1 || resp.Output[0].Content[0].Text != expectedText(2) || resp.Usage.OutputTokens != 2 || resp.KV != nil {
		t.Fatalf("%d %s", r.status, r.body)
	}
	h.expectLegs(1, 1)
	if db := h.legs("decode")[0].Body; !bytes.Contains(db, []byte(`"stream":true`)) {
		t.Fatalf("the decode leg of a non-streaming response must stream: %s", db)
	}
}

func TestResponsesFaultsOnEachLeg(t *testing.T) {
	cases := []struct{ engine, fault, kind string }{
		{"p0", "prefill.status=500", "engine_status"},
		{"p0", "prefill.bad_descriptor=missing_engine", "invalid_descriptor"},
		{"d0", "decode.status=500", "engine_status"},
		{"d0", "decode.hang_first_token", "first_token_timeout"},
	}
	for _, tc := range cases {
		t.Run(tc.fault, func(t *testing.T) {
			t.Parallel()
			h := retryHarness(t, retries(2))
			h.inject(tc.engine, tc.fault, 1)
			r := h.send("/v1/responses", responsesBody("hi", true, ""))
			if r.status != 200 {
				t.Fatalf("%d %s", r.status, r.body)
			}
			if evs := readResponsesStream(t, r.body); deltas(evs) != expectedText(3) || evs[len(evs)-1].typ != "response.incomplete" {
				t.Fatalf("stream %s", r.body)
			}
			h.expectAccess(r.id, 200, 2, tc.kind)
		})
	}
	// One attempt: the fault is the client's answer, in the error envelope.
	t.Run("no retry", func(t *testing.T) {
		t.Parallel()
		h := retryHarness(t)
		h.inject("d0", "decode.hang_first_token", 1)
		r := h.send("/v1/responses", responsesBody("hi", true, ""))
		expectError(t, r, 504, "first_token_timeout", "")
	})
}

func TestResponsesFailureAfterCommitEndsWithAnErrorEvent(t *testing.T) {
	h := retryHarness(t, retries(2))
	// The engine drops the connection after two tokens: the router appends the error event.
	r := h.send("/v1/responses", responsesBody("@sim:decode.close_after=2", true, ""))
	evs := readResponsesStream(t, r.body)
	last := evs[len(evs)-1]
	if r.status != 200 || deltas(evs) != expectedText(2) || last.typ != "error" || str(last.data["code"]) != "closed_early" || str(last.data["message"]) == "" {
		t.Fatalf("%d %s", r.status, r.body)
	}
	h.expectAccess(r.id, 200, 1, "closed_early")
	// The engine's own error event is relayed as it sent it, and ends the stream.
	r = h.send("/v1/responses", responsesBody("@sim:decode.error_in_stream=500@1", true, ""))
	evs = readResponsesStream(t, r.body)
	last = evs[len(evs)-1]
	if deltas(evs) != expectedText(1) || last.typ != "error" || str(last.data["code"]) != "500" ||
		strings.Contains(str(last.data["message"]), "simulated fault") {
		t.Fatalf("the engine's error event, its text withheld (server.expose_engine_errors off): %s", r.body)
	}
	h.expectAccess(r.id, 200, 1, "stream_error")
	// Non-streaming: nothing was sent yet, so the failure gets an error status.
	r = h.send("/v1/responses", responsesBody("@sim:decode.close_after=2", false, ""))
	expectError(t, r, 502, "closed_early", "")
}

func TestResponsesClientHangUp(t *testing.T) {
	h := start(t, setup{prefill: 1, decode: 1, engine: sim.Options{Tokens: 1000, ITL: 5 * time.Millisecond}})
	id, respc, cancel := h.startRequest("/v1/responses", `{"model":"sim-model","input":"hi","stream":true}`)
	resp := <-respc
	if resp == nil || resp.StatusCode != 200 {
		t.Fatalf("%v", resp)
	}
	buf := make([]byte, 4096)
	var got []byte
	for !bytes.Contains(got, []byte("response.output_text.delta")) {
		n, err := resp.Body.Read(buf)
		got = append(got, buf[:n]...)
		if err != nil {
			t.Fatalf("stream ended: %v %q", err, got)
		}
	}
	cancel()
	resp.Body.Close()
	h.expectAborted("d0", 1, 3*time.Second)
	if l := h.accessLine(id); str(l["outcome"]) != "client_gone" {
		t.Fatalf("access log %v", l)
	}
}

func TestResponsesEngineErrorEventRelayedWhenExposed(t *testing.T) {
	h := start(t, setup{prefill: 1, decode: 1, engine: sim.Options{Tokens: 4},
		config: func(c *config.Config) { c.Server.ExposeEngineErrors = true }})
	r := h.send("/v1/responses", responsesBody("@sim:decode.error_in_stream=503@2", true, ""))
	evs := readResponsesStream(t, r.body)
	last := evs[len(evs)-1]
	if deltas(evs) != expectedText(2) || last.typ != "error" || str(last.data["code"]) != "503" ||
		!strings.Contains(str(last.data["message"]), "simulated fault") {
		t.Fatalf("%s", r.body)
	}
}
