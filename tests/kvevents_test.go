package tests

import (
	"fmt"
	"testing"
	"time"

	"github.com/narwhal-router/narwhal/bench/sim"
	"github.com/narwhal-router/narwhal/config"
	"github.com/narwhal-router/narwhal/internal/testwait"
)

// TestPlacementFollowsTheEnginesKVEvents: with placement.kv_events, the router follows each
// simulated engine's KV cache events (vLLM's ZeroMQ stream, with its replay socket) into an
// exact prefix index. A repeated prompt goes to the engine whose events say it holds the
// prefix, and the client sees the engine's cached tokens; once that engine's cache is emptied
// (a restart: AllBlocksCleared), the exact index knows at once, and the prompt is placed as a
// miss where our own placements alone would still have claimed a hit.
func TestPlacementFollowsTheEnginesKVEvents(t *testing.T) {
	eng := sim.Options{Tokens: 2, MaxNumSeqs: 8, PromptTokensDetails: true,
		KVEvents: "tcp://127.0.0.1:0", KVEventsReplay: "tcp://127.0.0.1:0"}
	h := start(t, setup{both: 3, engine: eng,
		config: func(c *config.Config) {
			policy(config.DisaggNever, 0)(c)
			c.Placement.Policy = config.PlacePrefix
			c.Placement.Tokens.Default.Source = config.TokensRender // the engines' /v1/completions/render
		},
		fleetConfig: func(f *sim.Fleet, c *config.Config) {
			for i := range c.Engines {
				pub, replay := f.Engine(c.Engines[i].Name).KVEvents()
				c.Engines[i].KVEvents = config.EngineKVEvents{Endpoint: pub, ReplayEndpoint: replay}
			}
		}})
	prompt := words("k", 200) // 12 full blocks of 16 tokens, 6 router blocks of 32 words
	// ZeroMQ subscribers miss what is published before they connect: requests until one
	// engine's events are indexed (each request a new prompt, so no placement is a hit yet).
	indexed := func(engine string, blocks float64, within time.Duration) bool {
		return testwait.Within(within, 10*time.Millisecond, func() bool {
			return h.metric(fmt.Sprintf(`narwhal_kv_index_blocks{engine=%q}`, engine)) >= blocks
		})
	}
	var home string
	for i := 0; home == ""; i++ {
		if i == 5 {
			t.Fatal("no engine's KV events reached the index after 5 requests")
		}
		p := fmt.Sprintf("warm%d %s", i, prompt)
		r := h.send("/v1/completions", completions(p))
		if r.status != 200 {
			t.Fatalf("status %d: %s", r.status, r.body)
		}
		if e := str(h.accessLine(r.id)["consumer"]); indexed(e, 12, 3*time.Second) {
			home, prompt = e, p
		}
	}
	hits := h.metric(`narwhal_prefix_placements_total{phase="decode",result="hit"}`)
	again := h.send("/v1/completions", completions(prompt+" "+words("more", 20)))
	if got := str(h.accessLine(again.id)["consumer"]); got != home {
		t.Fatalf("the repeat went to %s, not %s whose events say it holds the prefix", got, home)
	}
	if got := cachedTokens(t, again.body); got != 192 {
		t.Fatalf("the repeat reports cached_tokens %d, want 192 (12 blocks the engine held)", got)
	}
	h.waitMetric(`narwhal_prefix_placements_total{phase="decode",result="hit"}`, hits+1)
	h.waitMetricAtLeast(fmt.Sprintf(`narwhal_kv_events_total{engine=%q,result="batch"}`, home), 1)

	// The engine restarts with an empty cache: the index hears it, and the prompt is a miss.
	h.simEngine(home).Restart()
	eventually(t, 10*time.Second, func() bool {
		return h.metric(fmt.Sprintf(`narwhal_kv_index_blocks{engine=%q}`, home)) == 0
	}, func() string { return home + "'s exact index was not emptied by its AllBlocksCleared" })
	// Every placement so far is counted (the hit above was waited for); the next one is a miss.
	misses := h.metric(`narwhal_prefix_placements_total{phase="decode",result="miss"}`)
	h.send("/v1/completions", completions(prompt))
	h.waitMetric(`narwhal_prefix_placements_total{phase="decode",result="miss"}`, misses+1)
	if n := h.metric(`narwhal_prefix_placements_total{phase="decode",result="hit"}`); n != hits+1 {
		t.Fatalf("after the engine's cache was cleared the prompt was placed as a hit (%v hits): the index still claimed it", n)
	}
}
