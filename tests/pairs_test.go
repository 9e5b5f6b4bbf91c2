package tests

import (
	"fmt"
	"net/http"
	"testing"
	"time"

	"github.com/narwhal-router/narwhal/bench/sim"
	"github.com/narwhal-router/narwhal/config"
)

// An asymmetric fleet: p0 and d0 run another configuration than p1 and d1, so vLLM's KV
// handshake refuses p0→d1 and p1→d0 (the simulator refuses it as vLLM's NixlConnector does).
// The router keeps those pairs apart: every request is served, through p0→d0 and p1→d1 only,
// neither engine's breaker opens, and kv_pair_state shows each pair's state.

// crossPairs are the pairs the asymmetric fleet cannot transfer on.
var crossPairs = [][2]string{{"p0", "d1"}, {"p1", "d0"}}

// pairState is a pair's kv_pair_state series for state.
func pairState(producer, consumer, state string) string {
	return fmt.Sprintf(`narwhal_kv_pair_state{consumer=%q,producer=%q,state=%q}`, consumer, producer, state)
}

// expectNoBreakerOpened fails the test if any engine failed its join check or left admission
// since the router started.
func (h *harness) expectNoBreakerOpened() {
	h.t.Helper()
	h.expectFleetAdmitted("after the requests")
	for _, e := range []string{"p0", "p1", "d0", "d1"} {
		if n := h.metric(fmt.Sprintf(`narwhal_engine_join_checks_total{engine=%q,result="failure"}`, e)); n != 0 {
			h.t.Errorf("%s failed %v join checks", e, n)
		}
		for _, to := range []string{"ejected", "quarantined"} {
			if n := h.metric(fmt.Sprintf(`narwhal_breaker_transitions_total{engine=%q,from="admitted",to=%q}`, e, to)); n != 0 {
				h.t.Errorf("%s's breaker: %v transitions to %s", e, n, to)
			}
		}
	}
}

// sendAll sends n requests and fails the test unless each is served.
func (h *harness) sendAll(n int, what string) {
	h.t.Helper()
	for i := range n {
		if r := h.send("/v1/completions", completion(fmt.Sprintf("%s %d", what, i), false)); r.status != http.StatusOK {
			h.t.Fatalf("%s %d: %d %s", what, i, r.status, r.body)
		}
	}
}

// The KV cache dtype differs (as with --kv-cache-dtype fp8 on p0 and d0): the router reads it
// from each engine's vllm:cache_config_info and never pairs the engines whose caches differ.
func TestPairsWithDifferentCacheDTypesAreNeverUsed(t *testing.T) {
	h := start(t, setup{prefill: 2, decode: 2, engine: sim.Options{Tokens: 2},
		config: func(c *config.Config) { c.Placement.ScrapeIntervalS = 0.05 },
		fleetConfig: func(f *sim.Fleet, _ *config.Config) {
			f.Engine("p0").SetKVConfig("", "fp8")
			f.Engine("d0").SetKVConfig("", "fp8")
		}})
	// Each engine has one partner of the other role whose cache differs, and no pair is listed:
	// shapes are counted per engine, pairs listed only once their breaker opened.
	for _, e := range []string{"p0", "p1", "d0", "d1"} {
		h.waitMetric(fmt.Sprintf(`narwhal_kv_incompatible_partners{engine=%q}`, e), 1)
	}
	before := map[string]int64{}
	for _, d := range []string{"d0", "d1"} {
		before[d] = h.simEngine(d).Stats().KVLoadFailures
	}
	const n = 30
	h.sendAll(n, "asymmetric fleet")
	for _, d := range []string{"d0", "d1"} {
		if got := h.simEngine(d).Stats().KVLoadFailures - before[d]; got != 0 {
			t.Errorf("%s failed %d KV loads: an incompatible pair was used", d, got)
		}
	}
	if p0, p1 := h.simEngine("p0").Stats().PrefillRequests, h.simEngine("p1").Stats().PrefillRequests; p0 == 0 || p1 == 0 {
		t.Errorf("prefills: p0 %d, p1 %d; want both producers used", p0, p1)
	}
	h.expectNoBreakerOpened()
}

// The vLLM version differs, which the router cannot see: the first failed read confined to a
// pair opens that pair's breaker (not either engine's), requests keep being served, and once
// the engines match again a probe of the pair closes it.
func TestAPairBreakerOpensOnARefusedHandshakeAndAPairProbeClosesIt(t *testing.T) {
	h := start(t, setup{prefill: 2, decode: 2, engine: sim.Options{Tokens: 2},
		config: func(c *config.Config) { c.Recovery.MaxAttempts = 3 },
		fleetConfig: func(f *sim.Fleet, _ *config.Config) {
			f.Engine("p0").SetKVConfig("0.99.0", "")
			f.Engine("d0").SetKVConfig("0.99.0", "")
		}})
	deadline := time.Now().Add(5 * time.Second)
	i := 0
	eventually(t, 5*time.Second, func() bool {
		h.sendAll(1, fmt.Sprintf("until the pairs open %d", i))
		i++
		return h.metric(pairState("p0", "d1", "closed")) == 0 && h.metric(pairState("p1", "d0", "closed")) == 0 &&
			h.metric(pairState("p0", "d1", "open"))+h.metric(pairState("p0", "d1", "probing")) == 1 &&
			h.metric(pairState("p1", "d0", "open"))+h.metric(pairState("p1", "d0", "probing")) == 1
	}, func() string { return fmt.Sprintf("the cross pairs' breakers did not open in %d requests", i) })
	t.Logf("both cross pairs shown open after %d requests, %v before the deadline", i, time.Until(deadline).Round(time.Millisecond))
	before := map[string]int64{}
	for _, d := range []string{"d0", "d1"} {
		before[d] = h.simEngine(d).Stats().KVLoadFailures
	}
	h.sendAll(20, "with the pairs open")
	for _, d := range []string{"d0", "d1"} {
		if got := h.simEngine(d).Stats().KVLoadFailures - before[d]; got > 2 { // a pair probe may land meanwhile
			t.Errorf("%s failed %d KV loads with its pair open", d, got)
		}
	}
	h.expectNoBreakerOpened()

	h.simEngine("p0").SetKVConfig(sim.DefaultVersion, "")
	h.simEngine("d0").SetKVConfig(sim.DefaultVersion, "")
	for _, p := range crossPairs {
		h.waitMetric(pairState(p[0], p[1], "closed"), 1)
		h.waitMetric(fmt.Sprintf(`narwhal_kv_pair_breaker_transitions_total{consumer=%q,producer=%q,to="closed"}`, p[1], p[0]), 1)
	}
	h.expectNoBreakerOpened()
}
