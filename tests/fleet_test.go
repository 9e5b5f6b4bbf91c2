package tests

import (
	"bytes"
	"fmt"
	"io"
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/narwhal-router/narwhal/bench/sim"
	"github.com/narwhal-router/narwhal/config"
	"github.com/narwhal-router/narwhal/messages"
)

// words returns n distinct words starting with prefix, space-separated.
func words(prefix string, n int) string { return sim.Words(prefix, n) } // n words, n tokens

func completions(prompt string, extra ...string) string {
	return `{"model":"sim-model","prompt":"` + prompt + `","max_tokens":2` + strings.Join(extra, "") + `}`
}

// expectDecision checks the request's access-log line and the decision counter (which must
// have reached want) for decision and reason.
func (h *harness) expectDecision(id, decision, reason string, want float64) map[string]any {
	h.t.Helper()
	line := h.accessLine(id)
	if line["disaggregation"] != decision || line["disaggregation_reason"] != reason {
		h.t.Fatalf("access log says %v/%v, want %s/%s: %v", line["disaggregation"], line["disaggregation_reason"], decision, reason, line)
	}
	h.waitMetric(fmt.Sprintf(`narwhal_disaggregation_decisions_total{decision=%q,reason=%q}`, decision, reason), want)
	if decision == "local" && line["producer"] != nil {
		h.t.Fatalf("a local decode names a producer: %v", line)
	}
	return line
}

// waitMetric waits until series reads want (the reporter flushes on an interval).
func (h *harness) waitMetric(series string, want float64) {
	h.t.Helper()
	eventually(h.t, 5*time.Second, func() bool { return h.metric(series) == want }, func() string {
		return fmt.Sprintf("%s = %v, want %v", series, h.metric(series), want)
	})
}

func (h *harness) waitMetricAtLeast(series string, want float64) {
	h.t.Helper()
	eventually(h.t, 5*time.Second, func() bool { return h.metric(series) >= want }, func() string {
		return fmt.Sprintf("%s = %v, want at least %v", series, h.metric(series), want)
	})
}

func policy(p string, minTokens int) func(*config.Config) {
	return func(c *config.Config) {
		c.Disaggregation.Policy = p
		c.Disaggregation.MinPromptTokens = minTokens
		c.Placement.PrefixBlockWords = 16
	}
}

func TestAutoDecodesATwoWordPromptAloneOutOfTheBox(t *testing.T) {
	h := start(t, setup{prefill: 1, decode: 1, engine: sim.Options{Tokens: 2}, config: func(c *config.Config) {
		c.Disaggregation = config.Default().Disaggregation // the documented defaults, not the tests' always
	}})
	r := h.send("/v1/completions", `{"model":"sim-model","prompt":"hello world","stream":true}`)
	if r.status != 200 || !bytes.Contains(r.body, []byte("[DONE]")) {
		t.Fatalf("status %d: %s", r.status, r.body)
	}
	h.expectDecision(r.id, "local", "short_prompt", 1)
	h.expectLegs(0, 1)
	d := h.legs("decode")[0]
	if bytes.Contains(d.Body, []byte("kv_transfer_params")) {
		t.Fatalf("a local decode carried transfer parameters: %s", d.Body)
	}
	if st := h.simEngine("d0").Stats(); st.KVLoads != 0 {
		t.Fatalf("a local decode loaded KV (%d loads)", st.KVLoads)
	}
}

func TestEveryDisaggregationReason(t *testing.T) {
	long := words("w", 300)
	t.Run("long_prompt", func(t *testing.T) {
		h := start(t, setup{prefill: 1, decode: 1, engine: sim.Options{Tokens: 2}, config: policy(config.DisaggAuto, 100)})
		r := h.send("/v1/completions", completions(long))
		if r.status != 200 {
			t.Fatalf("status %d: %s", r.status, r.body)
		}
		line := h.expectDecision(r.id, "disaggregated", "long_prompt", 1)
		if line["producer"] != "p0" || line["consumer"] != "d0" {
			t.Fatalf("placed on %v → %v", line["producer"], line["consumer"])
		}
		h.expectLegs(1, 1)
	})
	t.Run("policy_always", func(t *testing.T) {
		h := start(t, setup{prefill: 1, decode: 1, engine: sim.Options{Tokens: 2}, config: policy(config.DisaggAlways, 100)})
		r := h.send("/v1/completions", completions("two words"))
		if r.status != 200 {
			t.Fatalf("status %d: %s", r.status, r.body)
		}
		h.expectDecision(r.id, "disaggregated", "policy_always", 1)
		h.expectLegs(1, 1)
	})
	t.Run("policy_never", func(t *testing.T) {
		h := start(t, setup{prefill: 1, decode: 1, engine: sim.Options{Tokens: 2}, config: policy(config.DisaggNever, 100)})
		r := h.send("/v1/completions", completions(long))
		if r.status != 200 {
			t.Fatalf("status %d: %s", r.status, r.body)
		}
		h.expectDecision(r.id, "local", "policy_never", 1)
		h.expectLegs(0, 1)
	})
	t.Run("n_gt_1", func(t *testing.T) {
		// Whatever the policy: the engine is asked for n=2 on a plain decode, never on a
		// prefill leg (a KV handoff carries one sequence), and its two choices reach the client.
		h := start(t, setup{prefill: 1, decode: 1, engine: sim.Options{Tokens: 2}, config: policy(config.DisaggAlways, 100)})
		r := h.send("/v1/completions", completions(long, `,"n":2`))
		if r.status != 200 || !strings.Contains(string(r.body), `"index":1`) {
			t.Fatalf("status %d: %s", r.status, r.body)
		}
		h.expectDecision(r.id, "local", "n_gt_1", 1)
		if n := len(h.legs("prefill")); n != 0 {
			t.Fatalf("%d prefill legs for n=2", n)
		}
	})
	t.Run("short_prompt", func(t *testing.T) {
		h := start(t, setup{prefill: 1, decode: 1, engine: sim.Options{Tokens: 2}, config: policy(config.DisaggAuto, 100)})
		r := h.send("/v1/completions", completions(words("s", 60)))
		if r.status != 200 {
			t.Fatalf("status %d: %s", r.status, r.body)
		}
		h.expectDecision(r.id, "local", "short_prompt", 1)
		h.expectLegs(0, 1)
	})
	t.Run("prefix_cached", func(t *testing.T) {
		h := start(t, setup{prefill: 1, decode: 1, engine: sim.Options{Tokens: 2}, config: policy(config.DisaggAuto, 100)})
		first := h.send("/v1/completions", completions(long))
		h.expectDecision(first.id, "disaggregated", "long_prompt", 1)
		// The next turn of the conversation: the consumer served its first 300 words.
		next := h.send("/v1/completions", completions(long+" "+words("t", 20)))
		if next.status != 200 {
			t.Fatalf("status %d: %s", next.status, next.body)
		}
		line := h.expectDecision(next.id, "local", "prefix_cached", 1)
		if line["prefix_match_blocks"] != float64(300/16) {
			t.Fatalf("prefix match %v blocks, want %d", line["prefix_match_blocks"], 300/16)
		}
		h.expectLegs(1, 2)
	})
	t.Run("prefill_saturated", func(t *testing.T) {
		h := start(t, setup{prefill: 1, decode: 1, engine: sim.Options{Tokens: 2}, config: func(c *config.Config) {
			policy(config.DisaggAuto, 100)(c)
			c.Engines[0].MaxInflight = 1 // p0: one prefill at a time
		}})
		// Hold the producer's one slot with a slow prefill.
		id, resp, cancel := h.startRequest("/v1/completions", completions(long+" @sim:prefill.slow_first_token=3000"))
		defer cancel()
		eventually(t, 5*time.Second, func() bool { return h.engine("p0").Reserved.Prefill == 1 },
			func() string { return "the slow prefill never took its slot" })
		r := h.send("/v1/completions", completions(words("x", 300)))
		if r.status != 200 {
			t.Fatalf("status %d: %s", r.status, r.body)
		}
		h.expectDecision(r.id, "local", "prefill_saturated", 1)
		if res := <-resp; res == nil || res.StatusCode != 200 {
			t.Fatalf("the held request failed: %v", res)
		}
		h.expectDecision(id, "disaggregated", "long_prompt", 1)
	})
	t.Run("no_producer", func(t *testing.T) {
		h := start(t, setup{both: 1, engine: sim.Options{Tokens: 2}, config: policy(config.DisaggAuto, 100)})
		r := h.send("/v1/completions", completions(long))
		if r.status != 200 {
			t.Fatalf("status %d: %s", r.status, r.body)
		}
		h.expectDecision(r.id, "local", "no_producer", 1)
		h.expectLegs(0, 1)
	})
}

// TestAutoPredictsWhereTheFirstTokenComesSooner: once the router has measured the producer's
// prefill rate, a long prompt goes local only when the producer's queue would make it wait
// longer than computing it on the consumer takes, and only within the consumer's stall budget.
// The engines compute prompts at 1 ms a token, so the producer's queue is the router's own
// reservations: a 1,500-word prompt held on it.
func TestAutoPredictsWhereTheFirstTokenComesSooner(t *testing.T) {
	for _, tc := range []struct {
		name, decision, reason string
		budget                 config.Seconds
	}{
		{"within the budget", "local", "predicted_ttft", 5},
		{"over the budget", "disaggregated", "local_stall", 0.05},
	} {
		t.Run(tc.name, func(t *testing.T) {
			h := start(t, setup{prefill: 1, decode: 1, engine: sim.Options{Tokens: 2, PrefillPerToken: time.Millisecond}, config: func(c *config.Config) {
				policy(config.DisaggAuto, 100)(c)
				c.Disaggregation.LocalStallBudgetS = tc.budget
			}})
			// Nothing measured yet: the fixed rule, no prediction in the log.
			first := h.send("/v1/completions", completions(words("a", 300)))
			if first.status != 200 {
				t.Fatalf("status %d: %s", first.status, first.body)
			}
			if line := h.expectDecision(first.id, "disaggregated", "long_prompt", 1); line["predicted_ttft_local_s"] != nil {
				t.Fatalf("a decision before any measurement logged a prediction: %v", line)
			}
			// An idle producer: computing the prompt locally would hold the consumer's streams
			// for as long as the producer takes, so it is disaggregated.
			held, resp, cancel := h.startRequest("/v1/completions", completions(words("b", 1500)))
			defer cancel()
			eventually(t, 5*time.Second, func() bool { return h.engine("p0").Reserved.Prefill == 1 },
				func() string { return "the long prefill never took its slot" })
			// Behind it on the producer a short long prompt would wait ~1.5 s; on the
			// consumer its first token is ~0.15 s away.
			r := h.send("/v1/completions", completions(words("c", 150)))
			if r.status != 200 {
				t.Fatalf("status %d: %s", r.status, r.body)
			}
			line := h.expectDecision(r.id, tc.decision, tc.reason, 1)
			local, _ := line["predicted_ttft_local_s"].(float64)
			pd, _ := line["predicted_ttft_disaggregated_s"].(float64)
			if local <= 0 || pd <= 2*local {
				t.Fatalf("predicted %v s local, %v s disaggregated: want the producer's queue to make it slower: %v", local, pd, line)
			}
			if res := <-resp; res == nil || res.StatusCode != 200 {
				t.Fatalf("the held request failed: %v", res)
			}
			h.expectDecision(held, "disaggregated", "long_prompt", 2)
			wantLegs := 3 // prefill legs: the first, the held one, and the last unless local
			if tc.decision == "local" {
				wantLegs = 2
			}
			h.expectLegs(wantLegs, 3)
		})
	}
}

// TestARetryIsNotASecondDecision: the decision counter holds one decision per request; the
// retry's own decision is counted apart.
func TestARetryIsNotASecondDecision(t *testing.T) {
	h := start(t, setup{prefill: 1, decode: 1, engine: sim.Options{Tokens: 2}, config: func(c *config.Config) {
		policy(config.DisaggAlways, 100)(c)
		c.Recovery.MaxAttempts = 2
	}})
	h.inject("d0", "decode.status=500", 1)
	r := h.send("/v1/completions", completions(words("r", 300)))
	if r.status != 200 {
		t.Fatalf("status %d: %s", r.status, r.body)
	}
	h.expectAccess(r.id, 200, 2, "engine_status") // the first attempt's fault, retried
	h.expectLegs(2, 2)
	h.expectDecision(r.id, "disaggregated", "policy_always", 1)
	h.waitMetric(`narwhal_disaggregation_retry_decisions_total{decision="disaggregated",reason="policy_always"}`, 1)
	// A second request without a fault adds one decision and no retry decision.
	r = h.send("/v1/completions", completions(words("s", 300)))
	if r.status != 200 {
		t.Fatalf("status %d: %s", r.status, r.body)
	}
	h.expectDecision(r.id, "disaggregated", "policy_always", 2)
	if n := h.metric(`narwhal_disaggregation_retry_decisions_total{decision="disaggregated",reason="policy_always"}`); n != 1 {
		t.Fatalf("%v retry decisions after a request without a retry, want 1", n)
	}
}

// TestPlacementPrefersThePrefixWithinTheLoadBound: turns of one conversation follow the engine
// that served its prefix, and a hot prefix held by many concurrent requests spreads once its
// engine reaches load_factor × the mean load.
func TestPlacementPrefersThePrefixWithinTheLoadBound(t *testing.T) {
	h := start(t, setup{prefill: 1, decode: 3, engine: sim.Options{Tokens: 40, ITL: 25 * time.Millisecond}, config: func(c *config.Config) {
		policy(config.DisaggAlways, 100)(c)
		c.Placement.Policy = config.PlacePrefix
		c.Placement.LoadFactor = 1.25
	}})
	convo := words("c", 200)
	first := h.send("/v1/completions", completions(convo, `,"max_tokens":1`))
	home := h.accessLine(first.id)["consumer"]
	for i := 0; i < 8; i++ {
		r := h.send("/v1/completions", completions(convo+" "+words(fmt.Sprintf("turn%d_", i), 5), `,"max_tokens":1`))
		if got := h.accessLine(r.id)["consumer"]; got != home {
			t.Fatalf("turn %d went to %v, not %v which served the conversation's prefix", i, got, home)
		}
	}
	h.waitMetric(`narwhal_prefix_placements_total{phase="decode",result="hit"}`, 8)

	// Nine concurrent requests on one hot prefix, each placed once the previous holds its slot.
	const n = 9
	var wg sync.WaitGroup
	ids := make([]string, n)
	for i := 0; i < n; i++ {
		id, resp, cancel := h.startRequest("/v1/completions", completions(convo+" "+words(fmt.Sprintf("hot%d_", i), 5), `,"stream":true,"max_tokens":40`))
		defer cancel()
		ids[i] = id
		wg.Add(1)
		go func() {
			defer wg.Done()
			if r := <-resp; r != nil {
				io.Copy(io.Discard, r.Body) // read it all: closing early hangs up
				r.Body.Close()
			}
		}()
		eventually(t, 5*time.Second, func() bool {
			held := 0
			for _, e := range h.engines() {
				held += e.Reserved.Decode
			}
			return held == i+1
		}, func() string {
			return fmt.Sprintf("request %d never took its decode slot: %+v %v", i, h.engines(), string(h.access.Bytes()))
		})
	}
	wg.Wait()
	per := map[any]int{}
	lines := h.accessByID(ids...)
	for _, id := range ids {
		per[lines[id]["consumer"]]++
	}
	// The bound: ⌈1.25 × 9 / 3⌉ = 4 concurrent requests at most on one engine.
	for engine, c := range per {
		if c > 4 {
			t.Fatalf("%v got %d of %d concurrent requests on one prefix: the load bound did not hold (%v)", engine, c, n, per)
		}
	}
	if len(per) < 3 {
		t.Fatalf("the hot prefix stayed on %d engines: %v", len(per), per)
	}
}

// simMetricsFault sets (or with body "" clears) the engine's /metrics fault through the
// simulator's admin API, as an operator's chaos tool would.
func simMetricsFault(t *testing.T, e *sim.Engine, body string) {
	t.Helper()
	method := http.MethodPost
	if body == "" {
		method = http.MethodDelete
	}
	req, _ := http.NewRequest(method, e.URL()+"/sim/metrics", strings.NewReader(body))
	req.Header.Set("Content-Type", "application/json")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode/100 != 2 {
		t.Fatalf("%s /sim/metrics: %d", method, resp.StatusCode)
	}
}

func TestScrapeFreshStaleAndFailing(t *testing.T) {
	h := start(t, setup{prefill: 1, decode: 1, engine: sim.Options{Tokens: 2}, config: func(c *config.Config) {
		c.Placement.ScrapeIntervalS = 0.05
		c.Placement.ScrapeStaleS = 0.3
		c.Placement.ScrapeTimeoutS = 0.1
	}})
	load := func(name string) messages.LoadState { return h.engine(name).Load }

	// Fresh: both engines scraped, and counted.
	eventually(t, 5*time.Second, func() bool { return load("p0").Fresh && load("d0").Fresh }, func() string {
		return fmt.Sprintf("no fresh scrape: p0 %+v, d0 %+v", load("p0"), load("d0"))
	})
	if l := load("d0"); l.ScrapedAt == nil || l.KVUsage == nil || l.ScrapeError != "" {
		t.Fatalf("fresh load view incomplete: %+v", l)
	}
	h.waitMetricAtLeast(`narwhal_engine_scrapes_total{engine="d0",result="ok"}`, 1)

	// Failing: /metrics answers 503; the error shows, and the last good scrape goes stale.
	simMetricsFault(t, h.simEngine("d0"), `{"status":503}`)
	eventually(t, 5*time.Second, func() bool { l := load("d0"); return l.ScrapeError != "" && !l.Fresh }, func() string {
		return fmt.Sprintf("a failing scrape is not visible: %+v", load("d0"))
	})
	if l := load("d0"); l.ScrapedAt == nil || l.ScrapeFailures < 1 || !strings.Contains(l.ScrapeError, "503") {
		t.Fatalf("stale load view: %+v", l)
	}
	h.waitMetricAtLeast(`narwhal_engine_scrapes_total{engine="d0",result="error"}`, 1)
	// A stale scrape is ignored: requests still flow, load is the reservations alone.
	if r := h.send("/v1/completions", completions("a b")); r.status != 200 {
		t.Fatalf("status %d with a stale scrape: %s", r.status, r.body)
	}

	// Slow: a /metrics slower than scrape_timeout_s fails the same way.
	simMetricsFault(t, h.simEngine("d0"), `{"delay_ms":1000}`)
	before := h.metric(`narwhal_engine_scrapes_total{engine="d0",result="error"}`)
	eventually(t, 5*time.Second, func() bool {
		return h.metric(`narwhal_engine_scrapes_total{engine="d0",result="error"}`) > before
	}, func() string { return "a scrape that timed out was not counted" })

	// Recovered: fresh again, the error gone.
	simMetricsFault(t, h.simEngine("d0"), "")
	eventually(t, 5*time.Second, func() bool { l := load("d0"); return l.Fresh && l.ScrapeError == "" }, func() string {
		return fmt.Sprintf("the scrape did not recover: %+v", load("d0"))
	})
	if l := load("p0"); !l.Fresh {
		t.Fatalf("p0's scrape suffered from d0's fault: %+v", l)
	}
}

// cachedTokens reads usage.prompt_tokens_details.cached_tokens from a response body or the
// usage chunk of a stream; -1 when absent.
func cachedTokens(t *testing.T, body []byte) int {
	t.Helper()
	i := bytes.LastIndex(body, []byte(`"cached_tokens":`))
	if i < 0 {
		return -1
	}
	var n int
	fmt.Sscanf(string(body[i+len(`"cached_tokens":`):]), "%d", &n)
	return n
}

// TestUsageReportsTheTrueCachedSplit: after a KV transfer the consumer says the whole prompt
// but one token was cached (vLLM's count of loaded tokens); the client sees what the fleet did
// not compute — the producer's own prefix-cache hits.
func TestUsageReportsTheTrueCachedSplit(t *testing.T) {
	eng := sim.Options{Tokens: 2, MaxNumSeqs: 8, PromptTokensDetails: true}
	prompt := words("u", 100) // 6 full blocks of 16 reusable: (100 − 1) / 16
	for _, stream := range []bool{false, true} {
		t.Run(fmt.Sprintf("stream=%v", stream), func(t *testing.T) {
			h := start(t, setup{prefill: 1, decode: 1, engine: eng, config: policy(config.DisaggAlways, 100)})
			body := completions(prompt, fmt.Sprintf(`,"stream":%v,"stream_options":{"include_usage":true}`, stream))
			if !stream {
				body = completions(prompt)
			}
			first := h.send("/v1/completions", body)
			if first.status != 200 {
				t.Fatalf("status %d: %s", first.status, first.body)
			}
			// The consumer claims 99 cached; the producer computed everything.
			if got := cachedTokens(t, first.body); got != 0 {
				t.Fatalf("first request reports cached_tokens %d, want 0 (the producer computed the prompt): %s", got, first.body)
			}
			again := h.send("/v1/completions", body)
			if got := cachedTokens(t, again.body); got != 96 {
				t.Fatalf("repeat reports cached_tokens %d, want 96 (the producer's prefix hits): %s", got, again.body)
			}
			if !bytes.Contains(again.body, []byte(`"prompt_tokens":100`)) {
				t.Fatalf("prompt_tokens changed: %s", again.body)
			}
			// What the engines said, for contrast: the decode legs reported 99 both times.
			if st := h.simEngine("d0").Stats(); st.KVLoads != 2 {
				t.Fatalf("%d KV loads, want 2", st.KVLoads)
			}
		})
	}
	t.Run("local decode passes the consumer's count", func(t *testing.T) {
		h := start(t, setup{prefill: 1, decode: 1, engine: eng, config: policy(config.DisaggNever, 100)})
		h.send("/v1/completions", completions(prompt))
		again := h.send("/v1/completions", completions(prompt))
		if got := cachedTokens(t, again.body); got != 96 {
			t.Fatalf("local repeat reports cached_tokens %d, want the consumer's 96: %s", got, again.body)
		}
	})
}

// TestProducersAreWeighedByPromptTokens: a producer computing one long prompt is busier than
// one computing a few short ones, so short prompts keep going to the other producer.
func TestProducersAreWeighedByPromptTokens(t *testing.T) {
	h := start(t, setup{prefill: 2, decode: 1, engine: sim.Options{Tokens: 1}, config: func(c *config.Config) {
		policy(config.DisaggAlways, 100)(c)
		c.Placement.Policy = config.PlaceP2C
	}})
	held := func() int {
		n := 0
		for _, e := range h.engines() {
			n += e.Reserved.Prefill
		}
		return n
	}
	longID, longResp, cancel := h.startRequest("/v1/completions", completions(words("L", 2000)+" @sim:prefill.slow_first_token=3000"))
	defer cancel()
	eventually(t, 5*time.Second, func() bool { return held() == 1 }, func() string { return "the long prefill never took its slot" })
	var ids []string
	var resps []<-chan *http.Response
	for i := 0; i < 3; i++ {
		id, resp, cancel := h.startRequest("/v1/completions", completions(words(fmt.Sprintf("s%d_", i), 20)+" @sim:prefill.slow_first_token=3000"))
		defer cancel()
		ids, resps = append(ids, id), append(resps, resp)
		eventually(t, 5*time.Second, func() bool { return held() == i+2 }, func() string { return fmt.Sprintf("short prefill %d never took its slot", i) })
	}
	for _, r := range append(resps, longResp) {
		if res := <-r; res == nil || res.StatusCode != 200 {
			t.Fatalf("a held request failed: %v", res)
		}
	}
	lines := h.accessByID(append(ids, longID)...)
	long := lines[longID]["producer"]
	for _, id := range ids {
		if p := lines[id]["producer"]; p == long {
			t.Fatalf("a short prompt went to %v, which was computing a 2000-word prompt, while the other producer had only short ones", p)
		}
	}
}
