package tests

import (
	"fmt"
	"strconv"
	"testing"
	"time"

	"github.com/narwhal-router/narwhal/bench/sim"
	"github.com/narwhal-router/narwhal/config"
	"github.com/narwhal-router/narwhal/transport"
)

// ranksSetup is one engine of four data-parallel ranks, decoding locally, placed by prefix;
// size is engines[].data_parallel_size (0: read from its metrics, scraped every 50 ms).
func ranksSetup(size int, more func(*config.Config)) setup {
	return setup{both: 1, engine: sim.Options{MaxNumSeqs: 4, Tokens: 2, PromptTokensDetails: true, DataParallelSize: 4},
		config: func(c *config.Config) {
			policy(config.DisaggNever, 0)(c)
			c.Placement.Policy = config.PlacePrefix
			c.Placement.ScrapeIntervalS = 0.05
			for i := range c.Engines {
				c.Engines[i].DataParallelSize = size
			}
			if more != nil {
				more(c)
			}
		}}
}

// rankOf is the rank a recorded request was pinned to, -1 when it carried no header.
func rankOf(t *testing.T, r sim.RecordedRequest) int {
	t.Helper()
	v := r.Get(transport.RankHeader)
	if v == "" {
		return -1
	}
	n, err := strconv.Atoi(v)
	if err != nil {
		t.Fatalf("%s: %q", transport.RankHeader, v)
	}
	return n
}

// lastGeneration is the newest completion e received (the scrapes of /metrics are recorded too).
func lastGeneration(t *testing.T, e *sim.Engine) sim.RecordedRequest {
	t.Helper()
	reqs := e.Requests()
	for i := len(reqs) - 1; i >= 0; i-- {
		if reqs[i].Path == "/v1/completions" {
			return reqs[i]
		}
	}
	t.Fatal("the engine received no completion")
	return sim.RecordedRequest{}
}

// An engine of four ranks configured as such: every request is pinned to a rank with
// X-data-parallel-rank, a repeated prompt goes back to the rank that computed it (the
// simulator's per-rank prefix-cache hits and the client's cached tokens say so), and other
// prompts spread over the other ranks.
func TestRepeatedPromptsReturnToTheirRank(t *testing.T) {
	h := start(t, ranksSetup(4, nil))
	e := h.fleet.Engines[0]
	ranks := map[string]int{}
	for round := range 3 {
		for p := range 4 {
			prompt := words(fmt.Sprintf("r%d", p), 64)
			r := h.send("/v1/completions", completions(prompt))
			if r.status != 200 {
				t.Fatalf("%d %s", r.status, r.body)
			}
			got := rankOf(t, lastGeneration(t, e))
			if got < 0 {
				t.Fatalf("the request reached the engine without %s", transport.RankHeader)
			}
			if round == 0 {
				ranks[prompt] = got
				continue
			}
			if got != ranks[prompt] {
				t.Fatalf("round %d: prompt %d went to rank %d, first to rank %d", round, p, got, ranks[prompt])
			}
			if n := cachedTokens(t, r.body); n < 48 {
				t.Fatalf("round %d: prompt %d reports %d cached tokens: its rank's cache was missed", round, p, n)
			}
		}
	}
	used := map[int]bool{}
	for _, n := range ranks {
		used[n] = true
	}
	if len(used) < 2 {
		t.Fatalf("four new prompts on an idle engine all went to one rank: %v", ranks)
	}
	var hits, queries int64
	for _, r := range e.Stats().Ranks {
		hits, queries = hits+r.PrefixCacheHits, queries+r.PrefixCacheQueries
	}
	// Rounds 2 and 3 hit (3 blocks of 16 tokens of each 64-word prompt: vLLM computes the
	// last token, and its block, again), round 1 cannot.
	if hits < 2*4*48 {
		t.Fatalf("the ranks hit %d of %d prompt tokens: repeats did not find their rank's cache", hits, queries)
	}
}

// With data_parallel_size left to discovery, the router reads the ranks from the engine
// label of the engine's metrics and pins requests to them; with 1, it never sends the header
// (the engine's own balancer places them: the router is blind to its ranks).
func TestRanksAreFoundInTheEnginesMetrics(t *testing.T) {
	h := start(t, ranksSetup(0, nil))
	e := h.fleet.Engines[0]
	pinned := -1
	eventually(t, 5*time.Second, func() bool {
		h.send("/v1/completions", completions(words("found", 40)))
		pinned = rankOf(t, lastGeneration(t, e))
		return pinned >= 0
	}, func() string { return "no request carried the rank header: the engine's four ranks were not found" })

	blind := start(t, ranksSetup(1, nil))
	for range 3 {
		blind.send("/v1/completions", completions(words("blind", 40)))
	}
	for _, r := range blind.fleet.Engines[0].Requests() {
		if r.Path == "/v1/completions" && rankOf(t, r) >= 0 {
			t.Fatalf("data_parallel_size 1 sent %s: %s", transport.RankHeader, r.Get(transport.RankHeader))
		}
	}
}

// Each rank's KV events feed the exact index on its own: the router follows rank n's stream on
// the configured ports offset by n (as vLLM binds them), /engines shows each rank's blocks, and
// a repeat goes to the rank whose events hold the prompt, which reports its cached tokens.
func TestEachRanksKVEventsAreFollowed(t *testing.T) {
	s := eventsSetup(sim.Options{DataParallelSize: 2}, config.TokenSource{Source: config.TokensRender}, func(c *config.Config) {
		for i := range c.Engines {
			c.Engines[i].DataParallelSize = 2
		}
	})
	s.both = 1
	h := start(t, s)
	e := h.fleet.Engines[0]
	home := map[int]string{} // a prompt each rank computed
	i := 0
	eventually(t, 10*time.Second, func() bool {
		ranks := h.engine(e.Name()).Load.Ranks
		if len(ranks) == 2 && ranks[0].EventBlocks >= 12 && ranks[1].EventBlocks >= 12 && len(home) == 2 {
			return true
		}
		prompt := words(fmt.Sprintf("ev%d_", i), 200) // 12 full blocks of 16 tokens
		i++
		if r := h.send("/v1/completions", completions(prompt)); r.status != 200 {
			t.Fatalf("%d %s", r.status, r.body)
		}
		home[rankOf(t, lastGeneration(t, e))] = prompt
		return false
	}, func() string {
		return fmt.Sprintf("both ranks' events did not reach the index: %+v, prompts by rank %v", h.engine(e.Name()).Load.Ranks, len(home))
	})
	for n := range 2 {
		r := h.send("/v1/completions", completions(home[n]+" "+words("more", 20)))
		if got := rankOf(t, lastGeneration(t, e)); got != n {
			t.Fatalf("a repeat of rank %d's prompt went to rank %d", n, got)
		}
		if got := cachedTokens(t, r.body); got != 192 {
			t.Fatalf("the repeat on rank %d reports cached_tokens %d, want 192 (12 blocks its events hold)", n, got)
		}
	}
}
