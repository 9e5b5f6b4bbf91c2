package sim

import (
	"bufio"
	"fmt"
	"net/http"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/narwhal-router/narwhal/bench/sim/tokenizer"
)

func words(tag string, n int) string { return Words(tag, n) }

// metrics scrapes e's /metrics, checks that it parses as Prometheus text (every sample
// follows the HELP and TYPE of its family, names and values well formed) and returns
// the samples by name without labels.
func metrics(t testing.TB, e *Engine) map[string]float64 {
	t.Helper()
	code, hdr, body := get(t, e.URL()+"/metrics")
	if code != 200 || !strings.HasPrefix(hdr.Get("Content-Type"), "text/plain; version=0.0.4") {
		t.Fatalf("/metrics: %d %q", code, hdr.Get("Content-Type"))
	}
	out := map[string]float64{}
	types := map[string]string{}
	helped := map[string]bool{}
	for i, line := range strings.Split(strings.TrimSuffix(string(body), "\n"), "\n") {
		switch {
		case strings.HasPrefix(line, "# HELP "):
			f := strings.SplitN(line, " ", 4)
			if len(f) != 4 {
				t.Fatalf("line %d %q: HELP without text", i+1, line)
			}
			helped[f[2]] = true
		case strings.HasPrefix(line, "# TYPE "):
			f := strings.Fields(line)
			if len(f) != 4 || (f[3] != "gauge" && f[3] != "counter") || !helped[f[2]] {
				t.Fatalf("line %d %q: bad TYPE (or no HELP before it)", i+1, line)
			}
			types[f[2]] = f[3]
		default:
			nameLabels, value, ok := strings.Cut(line, " ")
			name, labels, hasLabels := strings.Cut(nameLabels, "{")
			if !ok || !hasLabels || !strings.HasSuffix(labels, "}") || !strings.Contains(labels, `engine="0"`) {
				t.Fatalf("line %d %q: not a labelled sample", i+1, line)
			}
			v, err := strconv.ParseFloat(value, 64)
			if err != nil {
				t.Fatalf("line %d %q: value: %v", i+1, line, err)
			}
			family := name
			if types[name] == "" {
				family = strings.TrimSuffix(name, "_total")
				if types[family] != "counter" || family == name {
					t.Fatalf("line %d %q: sample of no declared family", i+1, line)
				}
			} else if types[name] != "gauge" {
				t.Fatalf("line %d %q: a counter's sample must end in _total", i+1, line)
			}
			out[name] = v
		}
	}
	return out
}

// tokenTimes streams a completions request and returns when each token chunk arrived,
// measured from the request.
func tokenTimes(t testing.TB, e *Engine, prompt string) []time.Duration {
	t.Helper()
	start := time.Now()
	resp, err := testClient.Post(e.URL()+"/v1/completions", "application/json", strings.NewReader(completionsStream(prompt)))
	if err != nil {
		t.Error(err)
		return nil
	}
	defer resp.Body.Close()
	var at []time.Duration
	sc := bufio.NewScanner(resp.Body)
	for sc.Scan() {
		if strings.HasPrefix(sc.Text(), `data: {`) {
			at = append(at, time.Since(start))
		}
	}
	if resp.StatusCode != 200 || sc.Err() != nil {
		t.Errorf("stream: %d %v", resp.StatusCode, sc.Err())
	}
	return at
}

// concurrently runs f(i) for i < n and waits for all.
func concurrently(n int, f func(i int)) {
	var wg sync.WaitGroup
	for i := range n {
		wg.Add(1)
		go func() {
			defer wg.Done()
			f(i)
		}()
	}
	wg.Wait()
}

func TestCapacityQueuesBeyondMaxNumSeqs(t *testing.T) {
	t.Parallel()
	e := startEngine(t, Options{MaxNumSeqs: 2, ITL: 10 * time.Millisecond, Tokens: 30})
	done := make(chan []time.Duration, 3)
	for i := range 3 {
		go func() { done <- tokenTimes(t, e, words(fmt.Sprint("q", i), 5)) }()
	}
	eventually(t, 5*time.Second, "2 running and 1 waiting on /metrics", func() bool {
		m := metrics(t, e)
		return m["vllm:num_requests_running"] == 2 && m["vllm:num_requests_waiting"] == 1
	})
	var ends []time.Duration
	for range 3 {
		at := <-done
		if len(at) != 30 {
			t.Fatalf("a stream delivered %d tokens, want 30", len(at))
		}
		ends = append(ends, at[len(at)-1])
	}
	s := e.Stats()
	if s.Queued != 1 || s.Running != 0 || s.Waiting != 0 || s.KVBlocksUsed != 0 || s.Completed != 3 {
		t.Errorf("after the three: %+v; want queued 1 and nothing left running, waiting or held", s)
	}
	// The third started only when one of the first two ended: its last token came about
	// one whole generation (30 steps of 10ms) after theirs.
	slowest, fastest := max(ends[0], ends[1], ends[2]), min(ends[0], ends[1], ends[2])
	if slowest-fastest < 200*time.Millisecond {
		t.Errorf("stream ends %v: the queued one should end a generation after the others", ends)
	}
	if m := metrics(t, e); m["vllm:num_requests_running"] != 0 || m["vllm:num_requests_waiting"] != 0 {
		t.Errorf("gauges after the load: %v", m)
	}
}

func TestCapacityGapGrowsWithBatch(t *testing.T) {
	t.Parallel()
	const itl, perSeq, tokens = time.Millisecond, 10 * time.Millisecond, 8
	e := startEngine(t, Options{MaxNumSeqs: 8, ITL: itl, ITLPerSeq: perSeq, Tokens: tokens})
	gap := func(at []time.Duration) time.Duration {
		if len(at) != tokens {
			t.Fatalf("%d tokens, want %d", len(at), tokens)
		}
		return (at[tokens-1] - at[0]) / (tokens - 1)
	}
	alone := gap(tokenTimes(t, e, "solo"))
	gaps := make([]time.Duration, 4)
	concurrently(4, func(i int) { gaps[i] = gap(tokenTimes(t, e, fmt.Sprint("batch", i))) })
	// Alone a step is itl + 1 × perSeq = 11ms; four together make it itl + 4 × perSeq = 41ms.
	if alone < itl+perSeq {
		t.Errorf("gap alone %v, want about %v", alone, itl+perSeq)
	}
	for _, g := range gaps {
		if g < 2*alone {
			t.Errorf("gap in a batch of 4: %v (alone %v); want it to grow with the batch (about %v)", g, alone, itl+4*perSeq)
		}
	}
}

func TestCapacityPrefixCacheSkipsCompute(t *testing.T) {
	t.Parallel()
	const perToken = time.Millisecond
	e := startEngine(t, Options{MaxNumSeqs: 4, PrefillPerToken: perToken, Tokens: 1, PromptTokensDetails: true})
	prompt := words("p", 200) // 12 full blocks of 16 and 8 words
	timed := func(prompt string) (time.Duration, string) {
		start := time.Now()
		code, _, body := post(t, e.URL(), "/v1/completions", completions(prompt))
		if code != 200 {
			t.Fatalf("%d %s", code, body)
		}
		return time.Since(start), string(body)
	}
	cold, body := timed(prompt)
	if cold < 200*perToken || !strings.Contains(body, `"prompt_tokens_details":null`) {
		t.Errorf("cold prompt took %v (want ≥ %v for 200 computed tokens); usage %s", cold, 200*perToken, body)
	}
	warm, body := timed(prompt)
	// 12 blocks (192 tokens) hit; 8 tokens are computed.
	if warm > cold/4 || !strings.Contains(body, `"usage":{"prompt_tokens":200,"total_tokens":201,"completion_tokens":1,"prompt_tokens_details":{"cached_tokens":192}}`) {
		t.Errorf("warm prompt took %v (cold %v), body %s; want the cached 192 tokens skipped and reported", warm, cold, body)
	}
	// A prompt that shares the first 100 words hits 6 blocks (96 tokens).
	_, body = timed(words("p", 100) + " " + words("other", 100))
	if !strings.Contains(body, `"cached_tokens":96}`) {
		t.Errorf("half-shared prompt: %s; want 96 cached tokens", body)
	}
	m := metrics(t, e)
	if m["vllm:prefix_cache_queries_total"] != 600 || m["vllm:prefix_cache_hits_total"] != 192+96 || m["vllm:cache_config_info"] != 1 {
		t.Errorf("prefix-cache counters %v; want 600 queried and 288 hit tokens", m)
	}
	if s := e.Stats(); s.PromptTokensComputed != 600-288 || s.KVBlocksUsed != 0 || s.KVBlocksCached == 0 {
		t.Errorf("stats %+v", s)
	}

	// Chat prompts are rendered with the chat template before hashing: the same messages
	// again hit every full block but the last token's, the same words split over two
	// messages (other template tokens from the start) hit nothing.
	chat := func(msgs string) string {
		code, _, body := post(t, e.URL(), "/v1/chat/completions", `{"messages":`+msgs+`}`)
		if code != 200 {
			t.Fatalf("chat: %d %s", code, body)
		}
		return string(body)
	}
	one := `[{"role":"user","content":` + quote(words("c", 40)) + `}]`
	chat(one)
	n := tokenizer.Default().Count(tokenizer.ChatML([]tokenizer.Message{{Role: "user", Content: words("c", 40)}}, true))
	if body = chat(one); !strings.Contains(body, fmt.Sprintf(`"cached_tokens":%d}`, (n-1)/16*16)) {
		t.Errorf("the same chat again: %s; want %d cached tokens", body, (n-1)/16*16)
	}
	body = chat(`[{"role":"system","content":` + quote(words("c", 20)) + `},{"role":"user","content":` + quote(words("c", 40)[len(words("c", 20))+1:]) + `}]`)
	if !strings.Contains(body, `"prompt_tokens_details":null`) {
		t.Errorf("chat with the same words over two messages: %s; want nothing cached", body)
	}
}

// A prompt waits until a step has tokens for it, as in vLLM: a backlog shows as waiting,
// and a prompt that waited behind an identical one hits the blocks that one computed.
func TestCapacityAdmitsWithinTheStepBudget(t *testing.T) {
	t.Parallel()
	// One step computes at most 64 prompt tokens and then lasts 64 × 20 ms: the second prompt
	// arrives well within the first one's step, even on a loaded machine.
	e := startEngine(t, Options{MaxNumSeqs: 8, MaxNumBatchedTokens: 64, PrefillPerToken: 20 * time.Millisecond,
		Tokens: 2, PromptTokensDetails: true})
	prompt := words("w", 64) // the whole budget: 3 full blocks reusable, (64 − 1) / 16
	first := make(chan string, 1)
	go func() {
		_, _, body := post(t, e.URL(), "/v1/completions", completions(prompt))
		first <- string(body)
	}()
	eventually(t, 5*time.Second, "the first prompt running", func() bool { return e.Stats().Running == 1 })
	second := make(chan string, 1)
	go func() {
		_, _, body := post(t, e.URL(), "/v1/completions", completions(prompt))
		second <- string(body)
	}()
	// The first prompt's step took the whole budget: the second waits (it has a free slot).
	eventually(t, 5*time.Second, "the second prompt waiting for budget", func() bool {
		m := metrics(t, e)
		return m["vllm:num_requests_waiting"] == 1 && m["vllm:num_requests_running"] == 1
	})
	if body := <-first; !strings.Contains(body, `"prompt_tokens_details":null`) {
		t.Errorf("first: %s; want nothing cached", body)
	}
	if body := <-second; !strings.Contains(body, `"cached_tokens":48}`) {
		t.Errorf("second: %s; want the first prompt's 3 blocks (48 tokens) hit", body)
	}
	if s := e.Stats(); s.PromptTokensComputed != 64+16 || s.PrefixCacheHits != 48 {
		t.Errorf("stats %+v; want 64 + 16 tokens computed and 48 hit", s)
	}
}

func TestCapacityBlockExhaustionWaits(t *testing.T) {
	t.Parallel()
	// 6 blocks of 16 tokens; each request needs ceil((50 + 10) / 16) = 4 blocks.
	e := startEngine(t, Options{MaxNumSeqs: 8, KVBlocks: 6, MaxModelLen: 96, ITL: 10 * time.Millisecond, Tokens: 10})
	done := make(chan []time.Duration, 2)
	go func() { done <- tokenTimes(t, e, words("a", 50)) }()
	eventually(t, 5*time.Second, "the first request running", func() bool { return e.Stats().Running == 1 })
	go func() { done <- tokenTimes(t, e, words("b", 50)) }()
	eventually(t, 5*time.Second, "the second waiting for blocks", func() bool {
		m := metrics(t, e)
		return m["vllm:num_requests_waiting"] == 1 && m["vllm:num_requests_running"] == 1 &&
			m["vllm:kv_cache_usage_perc"] == 4.0/6
	})
	for range 2 {
		if at := <-done; len(at) != 10 {
			t.Fatalf("%d tokens, want 10", len(at))
		}
	}
	if s := e.Stats(); s.Queued != 1 || s.KVBlocksUsed != 0 {
		t.Errorf("stats %+v", s)
	}

	// A prefill leg's blocks stay held while pinned: a request that needs them waits
	// until a consumer reads the pin, then runs.
	_, _, body := post(t, e.URL(), "/v1/completions", prefillBody(words("c", 50)))
	kv := descriptorOf(t, body)
	if s := e.Stats(); s.KVBlocksUsed != 4 || s.BlocksPinned != 4 {
		t.Fatalf("after the prefill leg: %+v; want its 4 blocks held", s)
	}
	waited := make(chan []time.Duration, 1)
	go func() { waited <- tokenTimes(t, e, words("d", 50)) }()
	eventually(t, 5*time.Second, "a request waiting behind the pin", func() bool { return e.Stats().Waiting == 1 })
	if s := e.Stats(); s.Running != 0 || s.KVBlocksUsed != 4 {
		t.Fatalf("while the pin holds its blocks: %+v; want the request waiting, not running", s)
	}
	d := startEngine(t, Options{Tokens: 1})
	if code, _, body := post(t, d.URL(), "/v1/completions", withKV(t, completions(words("c", 50)), kv)); code != 200 {
		t.Fatalf("consumer: %d %s", code, body)
	}
	if at := <-waited; len(at) != 10 {
		t.Fatalf("%d tokens after the pin was read", len(at))
	}
	if s := e.Stats(); s.KVBlocksUsed != 0 || s.BlocksRead != 4 {
		t.Errorf("after the read: %+v", s)
	}
}

func TestCapacityTransferCostAndConsumerCache(t *testing.T) {
	t.Parallel()
	const perBlock = 25 * time.Millisecond
	f, err := StartFleet(FleetOptions{Prefill: 1, Decode: 1, Engine: Options{
		MaxNumSeqs: 4, TransferPerBlock: perBlock, Tokens: 3, PromptTokensDetails: true}})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = f.Close() })
	p, d := f.Engine("p0"), f.Engine("d0")
	handoff := func(prompt string) (time.Duration, []string) {
		_, _, body := post(t, p.URL(), "/v1/completions", prefillBody(prompt))
		kv := descriptorOf(t, body)
		start := time.Now()
		code, _, body := post(t, d.URL(), "/v1/completions",
			withKV(t, `{"prompt":`+quote(prompt)+`,"stream":true,"stream_options":{"include_usage":true}}`, kv))
		if code != 200 {
			t.Fatalf("decode: %d %s", code, body)
		}
		return time.Since(start), sseData(t, body)
	}
	prompt := words("t", 40) // 3 blocks: 2 full, one partial
	took, ev := handoff(prompt)
	if took < 3*perBlock {
		t.Errorf("first decode took %v; want ≥ %v for 3 blocks moved", took, 3*perBlock)
	}
	if usage := ev[len(ev)-2]; !strings.Contains(usage,
		`"usage":{"prompt_tokens":40,"total_tokens":43,"completion_tokens":3,"prompt_tokens_details":{"cached_tokens":39}}`) {
		t.Errorf("usage %s; want the transferred prompt reported cached but its last token", usage)
	}
	if s := d.Stats(); s.BlocksLoaded != 3 || s.KVLoads != 1 {
		t.Errorf("consumer %+v", s)
	}
	// The consumer now holds the prompt's 2 full blocks: the same prompt again moves
	// only the partial one.
	took, _ = handoff(prompt)
	if s := d.Stats(); s.BlocksLoaded != 4 || took >= 3*perBlock {
		t.Errorf("second decode took %v, consumer %+v; want 1 more block moved", took, s)
	}
	// A same-worker decode of that prompt on the consumer hits its cache.
	_, _, body := post(t, d.URL(), "/v1/completions", completions(prompt))
	if !strings.Contains(string(body), `"cached_tokens":32}`) {
		t.Errorf("same-worker decode on the consumer: %s; want 32 cached tokens", body)
	}
	if s := p.Stats(); s.BlocksRead != 6 || s.BlocksPinned != 0 || s.KVBlocksUsed != 0 {
		t.Errorf("producer %+v; want every pinned block read and given back", s)
	}
}

// Without the capacity model a transfer still costs its time per block, and the
// consumer reports the transferred prompt as cached when asked to.
func TestTransferCostWithoutCapacityModel(t *testing.T) {
	t.Parallel()
	const perBlock = 15 * time.Millisecond
	p := startEngine(t, Options{})
	d := startEngine(t, Options{TransferPerBlock: perBlock, PromptTokensDetails: true, Tokens: 2})
	_, _, body := post(t, p.URL(), "/v1/completions", prefillBody(fortyWords))
	start := time.Now()
	code, _, body := post(t, d.URL(), "/v1/completions", withKV(t, completions(fortyWords), descriptorOf(t, body)))
	if took := time.Since(start); code != 200 || took < 3*perBlock {
		t.Errorf("decode: %d after %v; want ≥ %v", code, took, 3*perBlock)
	}
	if !strings.Contains(string(body), `"prompt_tokens_details":{"cached_tokens":39}`) {
		t.Errorf("usage: %s", body)
	}
	if s := d.Stats(); s.BlocksLoaded != 3 || s.Running != 0 || s.PrefixCacheQueries != 0 {
		t.Errorf("consumer %+v", s)
	}
	m := metrics(t, d)
	if m["vllm:prefix_cache_queries_total"] != 0 || m["vllm:num_requests_waiting"] != 0 {
		t.Errorf("metrics without the capacity model: %v", m)
	}
	_, _, text := get(t, d.URL()+"/metrics")
	if want := `vllm:cache_config_info{block_size="16",cache_dtype="auto",enable_prefix_caching="False",engine="0",num_gpu_blocks="8192"} 1.0`; !strings.Contains(string(text), want) {
		t.Errorf("/metrics lacks %s:\n%s", want, text)
	}
}

// A client that leaves a queued or running request gives its slot and blocks back.
func TestCapacityAbortReleases(t *testing.T) {
	t.Parallel()
	e := startEngine(t, Options{MaxNumSeqs: 1, ITL: 50 * time.Millisecond, Tokens: 1000})
	var conns []*wire
	for i := range 2 {
		w := exchange(t, e.URL(), request("/v1/completions", completionsStream(words(fmt.Sprint("x", i), 30))), 30*time.Millisecond, true)
		conns = append(conns, &w)
	}
	eventually(t, 5*time.Second, "one running, one waiting", func() bool {
		s := e.Stats()
		return s.Running == 1 && s.Waiting == 1
	})
	for _, w := range conns {
		w.conn.Close()
	}
	eventually(t, 5*time.Second, "both aborted and everything released", func() bool {
		s := e.Stats()
		return s.Aborted == 2 && s.Running == 0 && s.Waiting == 0 && s.KVBlocksUsed == 0
	})
}

func TestCapacityOptionsValidated(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		o    Options
		want string
	}{
		{Options{MaxNumSeqs: 2, KVBlocks: 10}, "max model len 4096"},
		{Options{MaxNumSeqs: -1}, "max num seqs -1"},
		{Options{BlockSize: -16}, "block size -16"},
		{Options{KVBlocks: -1}, "kv blocks -1"},
		{Options{MaxNumBatchedTokens: -1}, "max num batched tokens"},
		{Options{ITLPerSeq: -time.Millisecond}, "itl per seq"},
		{Options{TransferPerBlock: -time.Millisecond}, "transfer per block"},
	} {
		if e, err := Start(tc.o); err == nil || !strings.Contains(err.Error(), tc.want) {
			if e != nil {
				e.Close()
			}
			t.Errorf("%+v: %v, want an error naming %q", tc.o, err, tc.want)
		}
	}
}

// A router's scrape tests can make /metrics fail or lag.
func TestMetricsFault(t *testing.T) {
	t.Parallel()
	e := startEngine(t, Options{})
	if code, _, body := post(t, e.URL(), "/sim/metrics", `{"status":503}`); code != 200 {
		t.Fatalf("POST /sim/metrics: %d %s", code, body)
	}
	if code, hdr, body := get(t, e.URL()+"/metrics"); code != 503 || hdr.Get("Retry-After") != "1" ||
		!strings.Contains(string(body), `"type":"Service Unavailable"`) {
		t.Errorf("/metrics with a 503 fault: %d %s", code, body)
	}
	if code, _, _ := post(t, e.URL(), "/sim/metrics", `{"status":200}`); code != 400 {
		t.Errorf("a 200 'fault': %d, want 400", code)
	}
	post(t, e.URL(), "/sim/metrics", `{"delay_ms":300}`)
	client := &http.Client{Transport: &http.Transport{DisableKeepAlives: true, Proxy: nil}, Timeout: 50 * time.Millisecond}
	if resp, err := client.Get(e.URL() + "/metrics"); err == nil {
		resp.Body.Close()
		t.Errorf("/metrics with a 300ms delay answered a 50ms client: %d", resp.StatusCode)
	}
	req, _ := http.NewRequest(http.MethodDelete, e.URL()+"/sim/metrics", nil)
	if code, _, _ := do(t, req); code != 204 {
		t.Errorf("DELETE /sim/metrics: %d", code)
	}
	if m := metrics(t, e); m["vllm:num_requests_running"] != 0 {
		t.Errorf("metrics after the fault was cleared: %v", m)
	}
}
