package tests

import (
	"bytes"
	"strings"
	"testing"

	"github.com/narwhal-router/narwhal/bench/sim"
	"github.com/narwhal-router/narwhal/config"
)

func TestInvalidDescriptorsNeverReachTheConsumer(t *testing.T) {
	cases := []struct {
		fault, reason string
	}{
		{"bad_descriptor=missing_engine", "missing_engine_identity"},
		{"bad_descriptor=bad_blocks", "malformed_block_ids"},
		{"bad_descriptor=wrong_connector", "connector_mismatch"},
		{"bad_descriptor=wrong_endpoint", "endpoint_mismatch"},
		{"wrong_engine_id", "missing_engine_identity"},
	}
	h := start(t, setup{prefill: 1, decode: 1, engine: sim.Options{Tokens: 2}, config: func(c *config.Config) {
		c.Recovery.EjectAfter = 100 // keep the producer placeable through the table
	}})
	for _, tc := range cases {
		t.Run(tc.fault, func(t *testing.T) {
			for _, e := range h.fleet.Engines {
				e.ResetRecorded()
			}
			resp, body := h.post("/v1/completions", `{"model":"sim-model","prompt":"@sim:prefill.`+tc.fault+`","stream":true}`,
				"X-Request-Id", "req-"+tc.fault)
			if resp.StatusCode != 502 || !strings.Contains(string(body), tc.reason) || !strings.Contains(string(body), `"code":"invalid_descriptor"`) {
				t.Fatalf("status %d: %s", resp.StatusCode, body)
			}
			if n := len(h.legs("decode")); n != 0 {
				t.Fatalf("the consumer received %d requests", n)
			}
			h.assertNoReservations()
			last := h.accessLine("req-" + tc.fault)
			if last["descriptor_reason"] != tc.reason || last["error_engine"] != "p0" {
				t.Fatalf("access log: %v", last)
			}
		})
	}
}

func TestMissingDescriptorFollowsOnMissing(t *testing.T) {
	for _, policy := range []string{config.OnMissingRecompute, config.OnMissingFail} {
		t.Run(policy, func(t *testing.T) {
			h := start(t, setup{prefill: 1, decode: 1, engine: sim.Options{Tokens: 2}, config: func(c *config.Config) {
				c.Handoff.OnMissing = policy
			}})
			resp, body := h.post("/v1/completions", `{"model":"sim-model","prompt":"@sim:prefill.bad_descriptor=null"}`)
			decodes := h.legs("decode")
			if policy == config.OnMissingFail {
				if resp.StatusCode != 502 || !strings.Contains(string(body), "missing_descriptor") || len(decodes) != 0 {
					t.Fatalf("status %d, %d decodes: %s", resp.StatusCode, len(decodes), body)
				}
				return
			}
			if resp.StatusCode != 200 || len(decodes) != 1 || bytes.Contains(decodes[0].Body, []byte("kv_transfer_params")) {
				t.Fatalf("status %d, decodes %d: %s", resp.StatusCode, len(decodes), body)
			}
		})
	}
}

func TestUnpinnedIdentityStillFailsWhenTheKVCannotBeRead(t *testing.T) {
	h := start(t, setup{prefill: 1, decode: 1, engine: sim.Options{Tokens: 2}, config: func(c *config.Config) {
		for i := range c.Engines {
			// Unpinned; the simulator's side channel is on a free port, outside vLLM's range.
			_, port, _ := strings.Cut(c.Engines[i].KV.Endpoint, ":")
			c.Engines[i].KV.EngineID, c.Engines[i].KV.Endpoint = "", ""
			c.Engines[i].KV.AllowedPorts = []string{port}
		}
	}})
	// Not pinned, so the router cannot tell; the consumer fails to load the KV (HTTP 500).
	resp, body := h.post("/v1/completions", `{"model":"sim-model","prompt":"@sim:prefill.wrong_engine_id","stream":true}`)
	if resp.StatusCode != 502 || !strings.Contains(string(body), "engine_status") {
		t.Fatalf("status %d: %s", resp.StatusCode, body)
	}
}

func TestRejectedDescriptorIsRetriedWithAFreshPrefill(t *testing.T) {
	h := start(t, setup{prefill: 1, decode: 1, engine: sim.Options{Tokens: 2}, config: func(c *config.Config) {
		c.Recovery.MaxAttempts = 2
	}})
	p0 := h.fleet.Engine("p0")
	p0.InjectFault("prefill.bad_descriptor=bad_blocks", 1) // the first handoff only
	resp, body := h.post("/v1/completions", `{"model":"sim-model","prompt":"x","stream":true}`, "X-Request-Id", "retried")
	if resp.StatusCode != 200 || !strings.HasSuffix(string(body), "data: [DONE]\n\n") {
		t.Fatalf("status %d: %s", resp.StatusCode, body)
	}
	prefills, decodes := h.legs("prefill"), h.legs("decode")
	if len(prefills) != 2 || len(decodes) != 1 {
		t.Fatalf("%d prefill and %d decode legs, want 2 and 1", len(prefills), len(decodes))
	}
	if prefills[0].Get("X-Request-Id") == prefills[1].Get("X-Request-Id") ||
		decodes[0].Get("X-Request-Id") != prefills[1].Get("X-Request-Id") {
		t.Fatal("the retry did not get a fresh backend request id shared by both of its legs")
	}
	if l := h.accessLine("retried"); l["attempts"] != 2.0 {
		t.Fatalf("access log: %v", l)
	}
}
