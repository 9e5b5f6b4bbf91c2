package tests

import (
	"fmt"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/narwhal-router/narwhal/bench/sim"
	"github.com/narwhal-router/narwhal/config"
	"github.com/narwhal-router/narwhal/internal/testwait"
)

// The router routes on the engines' tokens (placement.tokens): the simulated engines tokenize,
// hash their blocks as vLLM does (sha256 from a random seed per start) and publish KV events
// with the blocks' token ids; the router re-keys the events by their tokens and tokenizes
// prompts itself (local, the simulator's tokenizer.json) or asks for them (render).

// simTokenizer is the simulator's tokenizer.json, as an operator points source local at a
// model's.
const simTokenizer = "../bench/sim/tokenizer/tokenizer.json"

// eventsSetup is three engines publishing KV events, placed by prefix, decoding locally, with
// tokens from src.
func eventsSetup(eng sim.Options, src config.TokenSource, more func(*config.Config)) setup {
	eng.Tokens, eng.PromptTokensDetails = 2, true
	eng.MaxNumSeqs = max(eng.MaxNumSeqs, 8)
	eng.KVEvents, eng.KVEventsReplay = "tcp://127.0.0.1:0", "tcp://127.0.0.1:0"
	return setup{both: 3, engine: eng,
		config: func(c *config.Config) {
			policy(config.DisaggNever, 0)(c)
			c.Placement.Policy = config.PlacePrefix
			src.BlockSize = max(src.BlockSize, sim.DefaultBlockSize)
			if src.RenderAPI == "" {
				src.RenderAPI = config.RenderAPIRender
			}
			c.Placement.Tokens.Default = src
			if more != nil {
				more(c)
			}
		},
		fleetConfig: func(f *sim.Fleet, c *config.Config) {
			for i := range c.Engines {
				pub, replay := f.Engine(c.Engines[i].Name).KVEvents()
				c.Engines[i].KVEvents = config.EngineKVEvents{Endpoint: pub, ReplayEndpoint: replay}
			}
		}}
}

// warmHome sends new prompts of body(prefix) until one engine's events about it reach the
// index (ZeroMQ subscribers miss what is published before they connect): that engine and
// the prefix.
func (h *harness) warmHome(body func(prefix string) string, blocks float64) (home, prefix string) {
	h.t.Helper()
	for i := range 5 {
		p := fmt.Sprintf("warm%d", i)
		series := func(e string) string { return fmt.Sprintf(`narwhal_kv_index_blocks{engine=%q}`, e) }
		before := map[string]float64{}
		for _, e := range h.fleet.Engines {
			before[e.Name()] = h.metric(series(e.Name()))
		}
		r := h.send(endpointOf(body(p)), body(p))
		if r.status != 200 {
			h.t.Fatalf("status %d: %s", r.status, r.body)
		}
		e := str(h.accessLine(r.id)["consumer"])
		if testwait.Within(3*time.Second, 10*time.Millisecond, func() bool { return h.metric(series(e)) >= before[e]+blocks }) {
			return e, p
		}
	}
	h.t.Fatal("no engine's KV events reached the index after 5 requests")
	return "", ""
}

func endpointOf(body string) string {
	if strings.Contains(body, `"messages"`) {
		return "/v1/chat/completions"
	}
	return "/v1/completions"
}

// expectPredicted checks the request's access line: consumer home, prompt blocks of kind, and
// the cached tokens placement predicted equal to those the engine reported.
func (h *harness) expectPredicted(id, home, kind string, reported int) {
	h.t.Helper()
	line := h.accessLine(id)
	if str(line["consumer"]) != home || str(line["prompt_blocks"]) != kind {
		h.t.Fatalf("placed on %v from %v blocks, want %s from %s: %v", line["consumer"], line["prompt_blocks"], home, kind, line)
	}
	if got, _ := line["predicted_cached_tokens"].(float64); int(got) != reported || reported <= 0 {
		h.t.Fatalf("predicted %v cached tokens, the engine reported %d: %v", line["predicted_cached_tokens"], reported, line)
	}
}

// With the engines' random seeds and events on, a repeated prompt goes to the engine holding
// it, and the cached tokens the router predicted there are the ones the engine reports: for
// completions prompts and for chat messages (ChatML, the simulator's template), tokenized by
// the router from the model's tokenizer.json.
func TestRepeatedPromptsGoWhereTheEnginesEventsSayTheyAre(t *testing.T) {
	h := start(t, eventsSetup(sim.Options{}, config.TokenSource{Source: config.TokensLocal, TokenizerJSON: simTokenizer,
		ChatTemplate: config.ChatTemplateML}, nil))
	long := words("k", 200) // 12 full blocks of 16 tokens, the 13th partial
	home, prefix := h.warmHome(func(p string) string { return completions(p + " " + long) }, 12)
	for i := range 3 { // three repeats: a random placement finds the home for all three 1 in 27 times
		r := h.send("/v1/completions", completions(prefix+" "+long+" "+words(fmt.Sprintf("more%d", i), 20)))
		if r.status != 200 {
			t.Fatalf("status %d: %s", r.status, r.body)
		}
		h.expectPredicted(r.id, home, "tokens", cachedTokens(t, r.body))
	}

	chatBody := func(p string) string {
		return `{"model":"sim-model","max_tokens":2,"messages":[{"role":"system","content":"` + p + " " + words("s", 100) +
			`"},{"role":"user","content":"` + words("u", 60) + `"}]}`
	}
	home, prefix = h.warmHome(chatBody, 8)
	for range 2 {
		r := h.send("/v1/chat/completions", chatBody(prefix))
		if r.status != 200 {
			t.Fatalf("status %d: %s", r.status, r.body)
		}
		h.expectPredicted(r.id, home, "tokens", cachedTokens(t, r.body))
	}
}

// An engine whose cache overflows evicts the prefix, says so (BlockRemoved), and is no longer
// preferred for it: the prompt is placed as a miss and predicted to find nothing cached.
func TestAnEvictedPrefixIsNoLongerPreferred(t *testing.T) {
	eng := sim.Options{KVBlocks: 72, MaxModelLen: 1152} // 72 blocks: two 800-token prompts overflow it
	h := start(t, eventsSetup(eng, config.TokenSource{Source: config.TokensRender}, nil))
	long := words("k", 200)
	home, prefix := h.warmHome(func(p string) string { return completions(p + " " + long) }, 12)
	prompt := completions(prefix + " " + long)
	r := h.send("/v1/completions", prompt)
	h.expectPredicted(r.id, home, "tokens", cachedTokens(t, r.body))

	// Other prompts straight to the engine push the prefix out of its cache.
	engine := h.simEngine(home)
	for i := range 2 {
		resp, err := http.Post(engine.URL()+"/v1/completions", "application/json",
			strings.NewReader(completions(words(fmt.Sprintf("flood%d", i), 800))))
		if err != nil || resp.StatusCode != 200 {
			t.Fatalf("flooding %s: %v %v", home, resp, err)
		}
		resp.Body.Close()
	}
	if st := engine.Stats(); st.KVBlocksEvicted < 13 {
		t.Fatalf("the flood evicted %d blocks, want the prefix's 13", st.KVBlocksEvicted)
	}
	series := fmt.Sprintf(`narwhal_kv_index_blocks{engine=%q}`, home)
	eventually(t, 10*time.Second, func() bool { return h.metric(series) == float64(engine.Stats().KVBlocksCached) },
		func() string {
			return fmt.Sprintf("the index holds %v blocks of %s, the engine %d", h.metric(series), home, engine.Stats().KVBlocksCached)
		})
	misses := h.metric(`narwhal_prefix_placements_total{phase="decode",result="miss"}`)
	r = h.send("/v1/completions", prompt)
	if r.status != 200 {
		t.Fatalf("status %d: %s", r.status, r.body)
	}
	h.waitMetric(`narwhal_prefix_placements_total{phase="decode",result="miss"}`, misses+1)
	if line := h.accessLine(r.id); line["predicted_cached_tokens"] != 0.0 {
		t.Fatalf("after the eviction the router still predicted cached tokens: %v", line)
	}
}

// A render service that fails or hangs costs at most render_timeout_s: the request is placed
// on the estimate and served, and the metric says why.
func TestAFailingOrSlowRenderFallsBackToTheEstimate(t *testing.T) {
	release := make(chan struct{})
	hostile := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if strings.Contains(r.URL.Path, "/chat/") { // slow: answers long after the timeout
			select {
			case <-release:
			case <-r.Context().Done():
			}
		}
		http.Error(w, `{"error":{"message":"render broke"}}`, http.StatusInternalServerError)
	}))
	defer hostile.Close()
	defer close(release)
	h := start(t, eventsSetup(sim.Options{}, config.TokenSource{Source: config.TokensRender, RenderURL: hostile.URL},
		func(c *config.Config) { c.Placement.Tokens.RenderTimeoutS = 0.2 }))
	for _, c := range []struct{ path, body, reason string }{
		{"/v1/completions", completions(words("f", 40)), "status"},
		{"/v1/chat/completions", chat(words("g", 40), false), "timeout"},
	} {
		start := time.Now()
		r := h.send(c.path, c.body)
		if r.status != 200 {
			t.Fatalf("%s: status %d: %s", c.path, r.status, r.body)
		}
		if d := time.Since(start); d > 5*time.Second {
			t.Fatalf("%s: served in %v: the render was not bounded", c.path, d)
		}
		if line := h.accessLine(r.id); line["prompt_blocks"] != "estimate" {
			t.Fatalf("%s: placed from %v blocks, want the estimate's: %v", c.path, line["prompt_blocks"], line)
		}
		h.waitMetricAtLeast(fmt.Sprintf(`narwhal_prompt_tokenization_total{model="sim-model",result=%q,source="render"}`, c.reason), 1)
	}
}

// With events on and no source of tokens (estimate), an engine keeps its prefix preference:
// the prompt's word blocks are matched on the estimate for every engine.
func TestAnEngineWithEventsKeepsPrefixPreferenceOnTheEstimate(t *testing.T) {
	h := start(t, eventsSetup(sim.Options{}, config.TokenSource{Source: config.TokensEstimate}, nil))
	body := func(p string) string { return completions(p + " " + words("k", 200)) }
	home, prefix := h.warmHome(body, 12) // its events are live
	prompt := body(prefix)
	for range 3 { // a random placement finds the home for all three 1 in 27 times
		r := h.send("/v1/completions", prompt)
		if line := h.accessLine(r.id); str(line["consumer"]) != home || line["prompt_blocks"] != "estimate" {
			t.Fatalf("the repeat went to %v from %v blocks, not %s whose placements hold it: %v", line["consumer"], line["prompt_blocks"], home, line)
		}
	}
}
