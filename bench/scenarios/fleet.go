package scenarios

import (
	"bufio"
	"bytes"
	"context"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"sort"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/narwhal-router/narwhal/bench/harness"
	"github.com/narwhal-router/narwhal/bench/report"
	"github.com/narwhal-router/narwhal/bench/sim"
	"github.com/narwhal-router/narwhal/bench/trace"
	"github.com/narwhal-router/narwhal/config"
	"github.com/narwhal-router/narwhal/node"
	"github.com/narwhal-router/narwhal/transport/kv"
)

// fleetPolicy is one arm of the fleet scenario: how the router disaggregates and places.
type fleetPolicy struct {
	Name, Disaggregation, Placement string
	ScrapeS                         float64
	Headroom                        float64 // disaggregation.decode_headroom; 0: the default
	// KVEvents has every engine publish its KV cache events and the router follow them
	// (placement.kv_events): prefix placement on the exact index instead of the estimate.
	KVEvents bool
	// FixedRule turns the TTFT prediction off (disaggregation.local_stall_budget_s 0): auto as
	// it decided before the prediction, for an A/B arm in the same run.
	FixedRule bool
	// Tokens is placement.tokens.default.source ("": the default, estimate).
	Tokens string
	// KVBlocks overrides the engines' KV cache size in blocks (0: fleetEngine's).
	KVBlocks int
	// Connector is every engine's kv.connector ("": nixl).
	Connector string
	// LoRABlind turns placement.lora_affinity off (lora.go's adapter-blind arm).
	LoRABlind bool
}

var fleetPolicies = []fleetPolicy{
	{Name: "(a) always P/D + p2c", Disaggregation: config.DisaggAlways, Placement: config.PlaceP2C},
	{Name: "(b) always P/D + round robin", Disaggregation: config.DisaggAlways, Placement: config.PlaceRoundRobin},
	{Name: "(c) auto + prefix", Disaggregation: config.DisaggAuto, Placement: config.PlacePrefix, ScrapeS: 0.25},
	{Name: "(d) auto + prefix on KV events", Disaggregation: config.DisaggAuto, Placement: config.PlacePrefix, ScrapeS: 0.25, KVEvents: true},
}

// fleetEngine is the simulated engine of the fleet scenario: the capacity model on, sized so
// the trace below loads the fleet without drowning it (bench/README.md, "Fleet").
func fleetEngine() sim.Options {
	return sim.Options{
		Models: []string{harness.Model}, MaxModelLen: 8192, Tokens: 256,
		MaxNumSeqs: 48, MaxNumBatchedTokens: 2048, KVBlocks: 16384, BlockSize: 16,
		ITL: 4 * time.Millisecond, ITLPerSeq: 150 * time.Microsecond, PrefillPerToken: 40 * time.Microsecond,
		TransferPerBlock: 50 * time.Microsecond, PromptTokensDetails: true,
	}
}

// fleetScale fits the trace to this machine.
func fleetScale(quick bool) trace.Scale {
	s := trace.Scale{TimeScale: 0.1, BlockTokens: 32, OutputScale: 0.25, MaxInputTokens: 6000, MaxOutputTokens: 256, Limit: 900}
	if quick {
		s.Limit = 250
	}
	return s
}

// fleetMode is how a workload is offered to the fleet.
type fleetMode struct {
	Name string
	// Sessions is 0 for an open-loop replay at the trace's scaled arrival times, which
	// measures latency at the trace's load; otherwise that many sessions send the
	// trace's requests in order, each the next one as soon as its previous one ends
	// (closed loop), which measures what the fleet can deliver.
	Sessions int
	// Speedup (open loop) divides the scaled arrival times: 2 offers twice the load.
	Speedup float64
}

func (m fleetMode) String() string {
	if m.Sessions == 0 && m.Speedup > 1 {
		return fmt.Sprintf("open loop at %g× the trace's scaled pace (arrival times ÷ %g); tokens/s over the whole run, "+
			"so a fleet that falls behind shows its capacity", m.Speedup, m.Speedup)
	}
	if m.Sessions == 0 {
		return "open loop at the trace's scaled arrival times"
	}
	return fmt.Sprintf("closed loop: %d sessions send the requests in trace order, each the next as soon as its last ends; "+
		"tokens/s and requests/s over the window in which all %d are busy (until the last request is sent)", m.Sessions, m.Sessions)
}

// fleetSessions is the closed loop's concurrency: enough to keep the producers' queues
// full under always P/D (a paced replay keeps about 30 requests in flight), well below
// what the four consumers can batch (4 × max_num_seqs 48).
const fleetSessions = 96

var fleetModes = []fleetMode{{Name: "paced"}, {Name: "2x pace", Speedup: 2}, {Name: "closed loop", Sessions: fleetSessions}}

// Fleet replays the Mooncake conversation trace (and its no-sharing control) against a
// simulated 2 prefill + 4 decode fleet with the capacity model on, once per placement policy
// and mode (paced, twice the pace, closed loop), and compares what the fleet delivers.
// Without the trace it reports that it skipped.
func Fleet(env harness.Env) (*report.Section, error) {
	sec := report.NewSection("fleet", "placement policies on a production trace (2 prefill + 4 decode, capacity model on)")
	path := env.Trace
	if _, err := os.Stat(path); err != nil {
		sec.Printf("SKIPPED: no trace at %s (%v); pass -trace PATH (the repository's copy: %s)", path, err, trace.DefaultPath)
		return sec, nil
	}
	recs, err := trace.Load(path)
	if err != nil {
		return nil, err
	}
	scale := fleetScale(env.Quick)
	workloads := []struct {
		name string
		recs []trace.Record
	}{{"trace", recs}, {"no sharing", trace.WithoutSharing(recs)}}
	sec.Printf("scaling: %s", scale)
	for _, m := range fleetModes {
		sec.Printf("mode %q: %s", m.Name, m)
	}
	for _, w := range workloads {
		rep, err := trace.NewReplay(w.recs, scale)
		if err != nil {
			return nil, err
		}
		sec.Printf("workload %q: %s", w.name, rep.Summary())
		for _, m := range fleetModes {
			t := report.NewTable("policy", "ok", "TTFT p50 ms", "TTFT p99 ms", "e2e p50 ms", "e2e p99 ms", "req/s", "out tok/s",
				"prefix hit %", "KV blocks moved", "disaggregated %")
			var series, rate []report.Series
			type arm struct{ p50, p99, tokens float64 }
			arms := map[string]arm{}
			for _, p := range fleetPolicies {
				harness.Logf("fleet: %s, %s, %s", w.name, m.Name, p.Name)
				r, err := runFleetArm(p, rep, m)
				if err != nil {
					return nil, fmt.Errorf("%s, %s, %s: %w", w.name, m.Name, p.Name, err)
				}
				ttft, e2e := r.sorted()
				t.Row(p.Name, fmt.Sprintf("%d/%d", r.ok, len(rep.Requests)),
					msInt(pct(ttft, 0.5)), msInt(pct(ttft, 0.99)), msInt(pct(e2e, 0.5)), msInt(pct(e2e, 0.99)),
					fmt.Sprintf("%.1f", r.requestsPerS()), fmt.Sprintf("%.0f", r.tokensPerS()), fmt.Sprintf("%.1f", 100*r.hitRate()),
					strconv.FormatInt(r.blocksMoved, 10), fmt.Sprintf("%.1f", 100*r.disaggShare()))
				key := fmt.Sprintf("fleet_%s_%s_%s_", slug(w.name), slug(m.Name), slug(p.Name[:3]))
				sec.Figure(key+"ttft_p99_ms", ms1(pct(ttft, 0.99)))
				sec.Figure(key+"tokens_per_s", report.Round(r.tokensPerS(), 0))
				arms[p.Name[:3]] = arm{ms1(pct(ttft, 0.5)), ms1(pct(ttft, 0.99)), r.tokensPerS()}
				series = append(series, report.Series{Name: p.Name, Points: r.points()})
				rate = append(rate, report.Series{Name: p.Name, Points: r.ratePoints()})
			}
			sec.Printf("%s, %s:", w.name, m.Name)
			sec.Add(t.String())
			if a, c := arms["(a)"], arms["(c)"]; a.p99 > 0 && a.p50 > 0 && a.tokens > 0 {
				// The comparison the issue asks for, within one run (the machine is shared).
				sec.Printf("(c) ÷ (a): TTFT p99 %.2f, TTFT p50 %.2f, out tok/s %.2f", c.p99/a.p99, c.p50/a.p50, c.tokens/a.tokens)
				key := fmt.Sprintf("fleet_%s_%s_c_over_a_", slug(w.name), slug(m.Name))
				sec.Figure(key+"ttft_p99", report.Round(c.p99/a.p99, 2))
				sec.Figure(key+"tokens_per_s", report.Round(c.tokens/a.tokens, 2))
			}
			file := env.Path("ttft-" + slug(w.name) + "-" + slug(m.Name) + ".png")
			chart := report.LineChart{Title: "TTFT p90 per second: " + w.name + ", " + m.Name,
				XLabel: "time into the run (s)", YLabel: "TTFT p90 of the requests sent that second (ms)", Series: series, NoMarkers: true}
			if err := chart.Save(file); err != nil {
				return nil, err
			}
			sec.Printf("plot: %s", file)
			if m.Sessions > 0 {
				file := env.Path("tokens-" + slug(w.name) + "-" + slug(m.Name) + ".png")
				chart := report.LineChart{Title: "Output tokens per second: " + w.name + ", " + m.Name,
					XLabel: "time into the run (s)", YLabel: "output tokens of the requests that ended (tokens/s)", Series: rate, NoMarkers: true}
				if err := chart.Save(file); err != nil {
					return nil, err
				}
				sec.Printf("plot: %s", file)
			}
		}
	}
	return sec, nil
}

func slug(s string) string {
	b := []byte{}
	for _, c := range []byte(s) {
		switch {
		case c >= 'a' && c <= 'z', c >= '0' && c <= '9':
			b = append(b, c)
		case c >= 'A' && c <= 'Z':
			b = append(b, c+32)
		case len(b) > 0 && b[len(b)-1] != '_':
			b = append(b, '_')
		}
	}
	return string(bytes.Trim(b, "_"))
}

func msInt(d time.Duration) string { return fmt.Sprintf("%.0f", ms1(d)) }
func ms1(d time.Duration) float64 {
	return float64(d) / float64(time.Millisecond)
}

func pct(sorted []time.Duration, q float64) time.Duration {
	if len(sorted) == 0 {
		return 0
	}
	return sorted[min(len(sorted)-1, int(q*float64(len(sorted))))]
}

// armResult is one policy's run.
type armResult struct {
	mu        sync.Mutex
	samples   []sample
	ok        int
	outTokens int64
	// span is the whole run; window the part over which the rates are taken (the span
	// for a paced replay; for a closed loop, until the last request was sent), with the
	// requests and tokens that ended in it.
	span, window time.Duration
	windowOK     int
	windowTokens int64
	hits, total  int64 // prefix-cache tokens hit and looked up, over every engine
	blocksMoved  int64
	// predictionError is the mean absolute difference, in tokens, between the cached tokens
	// the router predicted and those the engine reported (access log).
	predictionError float64
	// tokenizeP50 and tokenizeP99 bound the time placement.tokens added before placement: the
	// upper bounds of the router's histogram buckets holding those percentiles.
	tokenizeP50, tokenizeP99 float64
	lines, disagg            int
}

type sample struct {
	at, ttft, e2e time.Duration
	tokens        int
}

func (r *armResult) sorted() (ttft, e2e []time.Duration) {
	for _, s := range r.samples {
		ttft, e2e = append(ttft, s.ttft), append(e2e, s.e2e)
	}
	sort.Slice(ttft, func(i, j int) bool { return ttft[i] < ttft[j] })
	sort.Slice(e2e, func(i, j int) bool { return e2e[i] < e2e[j] })
	return ttft, e2e
}

// measure fixes the window and counts what ended in it.
func (r *armResult) measure(window time.Duration) {
	r.window, r.windowOK, r.windowTokens = window, 0, 0
	for _, s := range r.samples {
		if s.at+s.e2e <= window {
			r.windowOK++
			r.windowTokens += int64(s.tokens)
		}
	}
}

func (r *armResult) tokensPerS() float64 {
	if r.window <= 0 {
		return 0
	}
	return float64(r.windowTokens) / r.window.Seconds()
}

func (r *armResult) requestsPerS() float64 {
	if r.window <= 0 {
		return 0
	}
	return float64(r.windowOK) / r.window.Seconds()
}

func (r *armResult) hitRate() float64 {
	if r.total == 0 {
		return 0
	}
	return float64(r.hits) / float64(r.total)
}

func (r *armResult) disaggShare() float64 {
	if r.lines == 0 {
		return 0
	}
	return float64(r.disagg) / float64(r.lines)
}

// ratePoints are the output tokens of the requests that ended in each second of the run.
func (r *armResult) ratePoints() []report.Point {
	buckets := map[int]int{}
	last := 0
	for _, s := range r.samples {
		b := int((s.at + s.e2e) / time.Second)
		buckets[b] += s.tokens
		last = max(last, b)
	}
	out := make([]report.Point, 0, last+1)
	for b := 0; b <= last; b++ {
		out = append(out, report.Point{X: float64(b), Y: float64(buckets[b])})
	}
	return out
}

// points are the TTFT p90 of each second of the replay.
func (r *armResult) points() []report.Point {
	buckets := map[int][]time.Duration{}
	last := 0
	for _, s := range r.samples {
		b := int(s.at / time.Second)
		buckets[b] = append(buckets[b], s.ttft)
		last = max(last, b)
	}
	var out []report.Point
	for b := 0; b <= last; b++ {
		v := buckets[b]
		if len(v) == 0 {
			continue
		}
		sort.Slice(v, func(i, j int) bool { return v[i] < v[j] })
		out = append(out, report.Point{X: float64(b), Y: ms1(pct(v, 0.9))})
	}
	return out
}

// runFleetArm starts a fresh fleet (empty caches) and router for policy p and offers it rep
// in mode m.
func runFleetArm(p fleetPolicy, rep *trace.Replay, m fleetMode) (*armResult, error) {
	e := fleetEngine()
	if p.KVBlocks > 0 {
		e.KVBlocks = p.KVBlocks
	}
	rig, err := startFleetRig(p, e, rep.Scale.BlockTokens)
	if err != nil {
		return nil, err
	}
	defer rig.Close()
	res := &armResult{}
	t0 := time.Now()
	send := func(q trace.Request) {
		start := time.Now()
		ttft, tokens, err := streamOnce(context.Background(), rig.client, rig.url, q.CompletionsBody(harness.Model))
		if err != nil {
			return
		}
		res.mu.Lock()
		res.ok++
		res.outTokens += int64(tokens)
		res.samples = append(res.samples, sample{at: start.Sub(t0), ttft: ttft, e2e: time.Since(start), tokens: tokens})
		res.mu.Unlock()
	}
	var wg sync.WaitGroup
	if m.Sessions == 0 {
		speedup := max(m.Speedup, 1)
		for _, q := range rep.Requests {
			if d := time.Until(t0.Add(time.Duration(float64(q.At) / speedup))); d > 0 {
				time.Sleep(d)
			}
			wg.Add(1)
			go func(q trace.Request) {
				defer wg.Done()
				send(q)
			}(q)
		}
		wg.Wait()
		res.span = time.Since(t0)
		res.measure(res.span)
	} else {
		var next atomic.Int64
		var lastSent atomic.Int64 // ns after t0
		for range m.Sessions {
			wg.Add(1)
			go func() {
				defer wg.Done()
				for {
					i := int(next.Add(1)) - 1
					if i >= len(rep.Requests) {
						return
					}
					if i == len(rep.Requests)-1 {
						lastSent.Store(int64(time.Since(t0)))
					}
					send(rep.Requests[i])
				}
			}()
		}
		wg.Wait()
		res.span = time.Since(t0)
		res.measure(time.Duration(lastSent.Load()))
		if res.windowOK == 0 { // fewer requests than sessions: no busy window, the whole run
			res.measure(res.span)
		}
	}
	res.hits, res.total, res.blocksMoved = rig.cacheStats()
	res.lines, res.disagg = rig.decisions(len(rep.Requests))
	res.predictionError = rig.access.predictionError()
	if p.Tokens != "" {
		res.tokenizeP50, res.tokenizeP99 = rig.tokenizeTimes(p.Tokens)
	}
	return res, nil
}

// fleetRig is a fresh simulated fleet, 2 prefill + 4 decode engines (empty caches), and an
// in-process router in front of it configured for one policy.
type fleetRig struct {
	fleet  *sim.Fleet
	srv    *node.Server
	access *lockedBuffer
	client *http.Client
	url    string // the router's /v1/completions
	admin  string // the router's admin listener, http://host:port
}

// startFleetRig starts the fleet with engine options e and a router for policy p whose
// prefix index hashes blockWords-word blocks (one trace block).
func startFleetRig(p fleetPolicy, e sim.Options, blockWords int) (_ *fleetRig, err error) {
	if p.KVEvents {
		e.KVEvents, e.KVEventsReplay = "tcp://127.0.0.1:0", "tcp://127.0.0.1:0"
	}
	fleet, err := sim.StartFleet(sim.FleetOptions{Prefill: 2, Decode: 4, Engine: e})
	if err != nil {
		return nil, fmt.Errorf("fleet: %w", err)
	}
	defer func() {
		if err != nil {
			fleet.Close()
		}
	}()
	rt, err := node.Provision(fleetRouterConfig(p, blockWords, simEngines(fleet.Engines)), kv.Builtin())
	if err != nil {
		return nil, fmt.Errorf("router configuration: %w", err)
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, err
	}
	adminLn, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		ln.Close()
		return nil, err
	}
	access := &lockedBuffer{}
	srv, err := node.Start(rt, node.Options{AccessLog: access, Listener: ln, AdminListener: adminLn})
	if err != nil {
		return nil, fmt.Errorf("router: %w", err)
	}
	// Every arm measures the whole fleet from its first request.
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if err := srv.WaitJoined(ctx); err != nil {
		srv.Shutdown(ctx)
		return nil, fmt.Errorf("router: %w", err)
	}
	client := &http.Client{Timeout: 3 * time.Minute, Transport: &http.Transport{MaxIdleConnsPerHost: 2048, MaxConnsPerHost: 0}}
	return &fleetRig{fleet: fleet, srv: srv, access: access, client: client, url: "http://" + srv.Addr() + "/v1/completions",
		admin: "http://" + adminLn.Addr().String()}, nil
}

// simTokenizerJSON is the simulated engines' tokenizer, for placement.tokens source local, from
// the repository's root.
const simTokenizerJSON = "bench/sim/tokenizer/tokenizer.json"

// simTokenizerPath is simTokenizerJSON found from the working directory up: the bench runs from
// the repository's root, its tests from their package's directory, and a `narwhal serve` it
// starts reads the path from its own working directory. simTokenizerJSON when not found.
func simTokenizerPath() string {
	dir, err := os.Getwd()
	for err == nil {
		p := filepath.Join(dir, simTokenizerJSON)
		if _, statErr := os.Stat(p); statErr == nil {
			return p
		}
		parent := filepath.Dir(dir)
		if parent == dir {
			break
		}
		dir = parent
	}
	return simTokenizerJSON
}

// fleetRouterConfig is the router's configuration for policy p in front of engines, its
// prefix index hashing blockWords-word blocks: the production defaults but for the policy
// and for deadlines long enough that an overloaded fleet queues instead of failing.
func fleetRouterConfig(p fleetPolicy, blockWords int, engines []config.Engine) config.Config {
	cfg := config.Default()
	cfg.Request.DeadlineS = 120
	cfg.Engine.PrefillTimeoutS, cfg.Engine.FirstTokenTimeoutS = 60, 60
	cfg.Admission.QueueTimeoutS = 30
	cfg.Disaggregation.Policy = p.Disaggregation
	cfg.Placement.Policy = p.Placement
	cfg.Placement.PrefixBlockWords = blockWords
	cfg.Placement.ScrapeIntervalS = config.Seconds(p.ScrapeS)
	if p.Headroom > 0 {
		cfg.Disaggregation.DecodeHeadroom = p.Headroom
	}
	if p.FixedRule {
		cfg.Disaggregation.LocalStallBudgetS = 0
	}
	if p.Tokens != "" {
		cfg.Placement.Tokens.Default.Source = p.Tokens
		cfg.Placement.Tokens.Default.TokenizerJSON = simTokenizerPath()
	}
	cfg.Placement.LoRAAffinity = !p.LoRABlind
	cfg.Log.Level = "warn"
	cfg.Engines = engines
	if p.Connector != "" {
		for i := range cfg.Engines {
			cfg.Engines[i].KV.Connector = p.Connector
		}
	}
	return cfg
}

// simEngines are in-process simulated engines as the router's configuration lists them,
// with their KV event endpoints when they publish.
func simEngines(engines []*sim.Engine) []config.Engine {
	out := make([]config.Engine, 0, len(engines))
	for _, e := range engines {
		pub, replay := e.KVEvents()
		out = append(out, config.Engine{Name: e.Name(), URL: e.URL(), Role: config.Role(e.Role()), Models: e.Models(),
			KV:       config.KV{Connector: kv.NIXL, EngineID: e.EngineID(), Endpoint: e.KVEndpoint(), TransferModes: []string{"pull"}},
			KVEvents: config.EngineKVEvents{Endpoint: pub, ReplayEndpoint: replay}})
	}
	return out
}

// Close stops the router, then the fleet.
func (r *fleetRig) Close() {
	r.client.CloseIdleConnections()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	r.srv.Shutdown(ctx)
	r.fleet.Close()
}

// cacheStats are the fleet's prefix-cache tokens hit and looked up, and the KV blocks the
// consumers pulled, over every engine.
func (r *fleetRig) cacheStats() (hits, total, moved int64) {
	for _, e := range r.fleet.Engines {
		st := e.Stats()
		hits += st.PrefixCacheHits
		total += st.PrefixCacheQueries
		moved += st.BlocksLoaded
	}
	return hits, total, moved
}

// decisions counts the router's access-log lines and the disaggregated ones among them,
// waiting (up to 5 s: the log flushes on an interval) until there are n lines.
func (r *fleetRig) decisions(n int) (lines, disaggregated int) {
	deadline := time.Now().Add(5 * time.Second)
	for {
		lines, disaggregated = r.access.decisions()
		if lines >= n || time.Now().After(deadline) {
			return lines, disaggregated
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// streamOnce sends a streaming request and returns the time to its first token and the
// output tokens its usage reports. On an error after the first token (ctx's deadline, a
// cut stream) it still returns the time to the first token.
func streamOnce(ctx context.Context, c *http.Client, url string, body []byte) (ttft time.Duration, tokens int, err error) {
	start := time.Now()
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, url, bytes.NewReader(body))
	if err != nil {
		return 0, 0, err
	}
	req.Header.Set("Content-Type", "application/json")
	resp, err := c.Do(req)
	if err != nil {
		return 0, 0, err
	}
	defer resp.Body.Close()
	if resp.StatusCode != 200 {
		io.Copy(io.Discard, resp.Body)
		return 0, 0, fmt.Errorf("status %d", resp.StatusCode)
	}
	br := bufio.NewReaderSize(resp.Body, 16<<10)
	done := false
	for {
		line, err := br.ReadSlice('\n')
		if len(line) > 6 && bytes.HasPrefix(line, []byte("data: ")) {
			data := line[6:]
			switch {
			case bytes.HasPrefix(data, []byte("[DONE]")):
				done = true
			case bytes.Contains(data, []byte(`"error"`)):
				return ttft, 0, fmt.Errorf("stream error: %s", data)
			case bytes.Contains(data, []byte(`"choices":[]`)):
				if i := bytes.Index(data, []byte(`"completion_tokens":`)); i >= 0 {
					fmt.Sscanf(string(data[i+len(`"completion_tokens":`):]), "%d", &tokens)
				}
			case ttft == 0:
				ttft = time.Since(start)
			}
		}
		if err != nil {
			if err == io.EOF && done {
				return ttft, tokens, nil
			}
			if err == bufio.ErrBufferFull {
				continue
			}
			return ttft, 0, err
		}
	}
}

// lockedBuffer is the router's access log, counted for the disaggregation share.
type lockedBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (l *lockedBuffer) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.Write(p)
}

func (l *lockedBuffer) decisions() (lines, disaggregated int) {
	l.mu.Lock()
	defer l.mu.Unlock()
	b := l.b.Bytes()
	lines = bytes.Count(b, []byte("\n"))
	disaggregated = bytes.Count(b, []byte(`"disaggregation":"disaggregated"`))
	return lines, disaggregated
}
