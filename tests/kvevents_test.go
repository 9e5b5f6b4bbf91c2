package tests

import (
	"fmt"
	"testing"
	"time"

	"github.com/narwhal-router/narwhal/bench/sim"
	"github.com/narwhal-router/narwhal/config"
)

// TestPlacementFollowsTheEnginesKVEvents: with placement.kv_events, the router follows each
// simulated engine's KV cache events (vLLM's ZeroMQ stream, with its replay socket) into an
// exact prefix index. A repeated prompt goes to the engine whose events say it holds the
// prefix, and the client sees the engine's cached tokens; once that engine's cache is emptied
// (a restart: AllBlocksCleared), the exact index knows at once, and the prompt is placed as a
// miss where our own placements alone would still have claimed a hit.
func TestPlacementFollowsTheEnginesKVEvents(t *testing.T) {
	h := start(t, eventsSetup(sim.Options{}, config.TokenSource{Source: config.TokensRender}, nil)) // the engines' render
	prompt := words("k", 200)                                                                       // 12 full blocks of 16 tokens
	home, prefix := h.warmHome(func(p string) string { return completions(p + " " + prompt) }, 12)
	prompt = prefix + " " + prompt
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
