package scenarios

import (
	"context"
	"fmt"
	"net/http"
	"sort"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/narwhal-router/narwhal/bench/harness"
	"github.com/narwhal-router/narwhal/bench/loadgen"
	"github.com/narwhal-router/narwhal/bench/report"
	"github.com/narwhal-router/narwhal/bench/sim"
	"github.com/narwhal-router/narwhal/config"
	"github.com/narwhal-router/narwhal/transport/kv"
)

// thousandSize is how big the thousand scenario runs and how long it samples.
type thousandSize struct {
	producers, consumers int
	// window is one CPU sampling window; rounds how many idle windows each arm gets (the
	// median is reported).
	window time.Duration
	rounds int
	// intervals are the placement.scrape_interval_s values measured, one router each.
	intervals []float64
	// rate is the light load, requests/s; loadWindows how many windows of it (alternating
	// between the router without events and the one with them).
	rate        float64
	loadWindows int
	// startWithin bounds one router's start (every engine joined).
	startWithin time.Duration
}

func thousandSizeFor(quick bool) thousandSize {
	if quick {
		return thousandSize{producers: 250, consumers: 750, window: 4 * time.Second, rounds: 1, intervals: []float64{0.25, 1},
			rate: 10, loadWindows: 2, startWithin: 5 * time.Minute}
	}
	return thousandSize{producers: 250, consumers: 750, window: 10 * time.Second, rounds: 3, intervals: []float64{0.25, 1, 5},
		rate: 20, loadWindows: 4, startWithin: 5 * time.Minute}
}

// The light load's prompts: one of thousandPrefixes shared system prompts of
// thousandPrefixWords words, then a question of its own, so that engines store (and publish)
// blocks and prefix placement has something to find.
const (
	thousandPrefixes    = 8
	thousandPrefixWords = 256
	thousandOwnWords    = 64
	thousandTokens      = 16
)

// thousandArm is one router in front of the thousand engines.
type thousandArm struct {
	key, name string
	scrapeS   float64
	events    bool

	r       *harness.Router
	startup time.Duration
	idle    []float64 // % of one core per idle window
	scrapes []float64 // scrapes per second per idle window
	batches []float64 // KV event batches applied per second per idle window
}

// Thousand measures the router in front of 250 producers and 750 consumers of the simulator
// (one process): its start, its CPU for load collection — /metrics scraping at several
// intervals, KV event subscriptions — idle and under a light load, its memory, and that it
// serves. Every arm is its own router process, all running at once in front of the same
// fleet, so each idle window samples every arm alike.
func Thousand(env harness.Env) (*report.Section, error) {
	return runThousand(env, thousandSizeFor(env.Quick))
}

func runThousand(env harness.Env, size thousandSize) (*report.Section, error) {
	n := size.producers + size.consumers
	sec := report.NewSection("thousand", fmt.Sprintf("a router in front of %d engines (%d producers + %d consumers): load collection, memory, start", n, size.producers, size.consumers))
	c := sim.Calibrated
	fleetStart := time.Now()
	fleet, err := harness.StartFleet(env, harness.FleetOptions{Prefill: size.producers, Decode: size.consumers, ITL: c.ITL, Tokens: thousandTokens,
		Within: 2 * time.Minute, Args: []string{"--max-num-seqs", "48", "--max-model-len", "8192", "--enable-prompt-tokens-details",
			"--kv-events", "tcp://127.0.0.1:0", "--kv-events-replay", "tcp://127.0.0.1:0"}})
	if err != nil {
		return nil, err
	}
	defer fleet.Proc.Stop(5 * time.Second)
	fleetFDs, _ := harness.OpenFiles(fleet.Proc.Pid())
	sec.Printf("fleet: one `narwhal sim fleet` process, %d engines, capacity model calibrated (%s on %s), every engine publishing KV events; "+
		"started in %v with %d descriptors open (API, KV side channel, event PUB and replay sockets: 4 per engine)",
		len(fleet.Engines), c.Model, c.GPU, time.Since(fleetStart).Round(10*time.Millisecond), fleetFDs)

	// In the order they start: the lightest first (see below).
	arms := []*thousandArm{{key: "off", name: "no load collection"}, {key: "events", name: "KV events from every engine", events: true}}
	intervals := append([]float64(nil), size.intervals...)
	sort.Sort(sort.Reverse(sort.Float64Slice(intervals)))
	for _, s := range intervals {
		k := strconv.FormatFloat(s, 'g', -1, 64)
		arms = append(arms, &thousandArm{key: "scrape_" + strings.ReplaceAll(k, ".", "_") + "s", name: "scrape every " + k + " s", scrapeS: s})
	}
	defer func() {
		for _, a := range arms {
			if a.r != nil {
				a.r.Proc.Stop(5 * time.Second)
			}
		}
	}()

	// One router at a time, the lightest first: the router gives its engine actors 10 s to
	// start (actors/router.go), and on this shared 2-core machine a thousand of them overran
	// that when four routers started at once, and again beside a router scraping every
	// 0.25 s. A start that fails so is retried (twice at most) and counted.
	failedStarts := 0
	for _, a := range arms {
		for attempt := 0; ; attempt++ {
			err := startThousandArm(env, a, fleet.Engines, size)
			if err == nil {
				break
			}
			if attempt == 2 || !strings.Contains(err.Error(), "start engine actors") {
				return nil, err
			}
			failedStarts++
			harness.Logf("thousand: %v; starting it again", err)
		}
	}
	sec.Figure("failed_starts", failedStarts)
	if failedStarts > 0 {
		sec.Printf("router starts that failed (\"start engine actors: future: timeout\": the engine actors not started within the router's 10 s) and were retried: %d", failedStarts)
	}
	// Let every scraper go round a few times and every subscription connect.
	settle := time.Second
	for _, s := range size.intervals {
		settle = max(settle, time.Duration(2*s*float64(time.Second)))
	}
	time.Sleep(settle)

	for round := range size.rounds {
		harness.Logf("thousand: idle window %d of %d", round+1, size.rounds)
		before, err := sampleArms(arms, false)
		if err != nil {
			return nil, err
		}
		time.Sleep(size.window)
		after, err := sampleArms(arms, true)
		if err != nil {
			return nil, err
		}
		for i, a := range arms {
			wall := after[i].at.Sub(before[i].at)
			a.idle = append(a.idle, 100*(after[i].use.CPU-before[i].use.CPU).Seconds()/wall.Seconds())
			a.scrapes = append(a.scrapes, (after[i].scrapes-before[i].scrapes)/wall.Seconds())
			a.batches = append(a.batches, (after[i].batches-before[i].batches)/wall.Seconds())
		}
	}

	t := report.NewTable("router", "start s", "idle CPU % of a core", "scrapes/s", "µs CPU per scrape", "RSS MiB", "heap in use MiB", "goroutines", "descriptors")
	for _, a := range arms {
		cpu, scrapes := medianF(a.idle), medianF(a.scrapes)
		perScrape := "—"
		if a.scrapeS > 0 && scrapes > 0 {
			// Over the router without load collection: what scraping adds.
			us := (cpu - medianF(arms[0].idle)) / 100 * 1e6 / scrapes
			perScrape = report.Num(us)
			sec.Figure(a.key+"_us_per_scrape", report.Round(us, 1))
		}
		use, _ := harness.ReadUsage(a.r.Proc.Pid())
		heap, _ := a.r.Gauge("go_memstats_heap_inuse_bytes")
		gr, _ := a.r.Goroutines()
		fds, _ := harness.OpenFiles(a.r.Proc.Pid())
		t.Row(a.name, fmt.Sprintf("%.1f", a.startup.Seconds()), fmt.Sprintf("%.2f", cpu), report.Num(scrapes), perScrape,
			report.Num(float64(use.RSSKiB)/1024), mib(heap), strconv.Itoa(gr), strconv.Itoa(fds))
		sec.Figure(a.key+"_idle_cpu_pct", report.Round(cpu, 2))
		sec.Figure(a.key+"_rss_mib", report.Round(float64(use.RSSKiB)/1024, 1))
		sec.Figure(a.key+"_heap_mib", report.Round(heap/(1<<20), 1))
		sec.Figure(a.key+"_fds", fds)
		sec.Figure(a.key+"_start_s", report.Round(a.startup.Seconds(), 2))
		if a.key != "off" {
			sec.Target(report.Target{Name: "load collection, " + a.name + ", idle (whole router)", Value: report.Round(cpu, 2), Unit: "% of a core", Limit: 5})
		}
	}
	sec.Printf("idle: every router at once, %d window(s) of %v, median; CPU is utime+stime from /proc over the window; start: from the process's start "+
		"to ready with every engine joined, one router at a time (those started earlier already running); RSS, heap (go_memstats_heap_inuse_bytes), goroutines and descriptors after the idle windows", size.rounds, size.window)
	sec.Add(t.String())
	sec.Figure("engines", n)
	sec.Figure("fleet_fds", fleetFDs)

	if err := thousandLoad(env, sec, arms, size); err != nil {
		return nil, err
	}
	if env.Profile {
		thousandProfile(env, sec, arms[0], arms[len(arms)-1], size.window)
	}
	return sec, nil
}

// startThousandArm starts a's router in front of engines and records how long it took.
func startThousandArm(env harness.Env, a *thousandArm, engines []loadgen.Engine, size thousandSize) error {
	list := make([]config.Engine, len(engines))
	for i, e := range engines {
		list[i] = config.Engine{Name: e.Name, URL: e.URL, Role: config.Role(e.Role), Models: []string{harness.Model},
			KV: config.KV{Connector: kv.NIXL, EngineID: e.EngineID, Endpoint: e.KVEndpoint, TransferModes: []string{"pull"}}}
		if a.events {
			list[i].KVEvents = config.EngineKVEvents{Endpoint: e.KVEvents, ReplayEndpoint: e.KVEventsReplay}
		}
	}
	cfg := fleetRouterConfig(fleetPolicy{Disaggregation: config.DisaggAuto, Placement: config.PlacePrefix, ScrapeS: a.scrapeS}, 64, list)
	cfg.Log.AccessLog = false
	harness.Logf("thousand: starting the router %q", a.name)
	r, took, err := harness.StartServe(env, "router-"+a.key, cfg, size.startWithin)
	if err != nil {
		return fmt.Errorf("%s: %w", a.name, err)
	}
	a.r, a.startup = r, took
	return nil
}

// armSample is one router's CPU and counters at one instant.
type armSample struct {
	at               time.Time
	use              harness.Usage
	scrapes, batches float64
}

// sampleArms reads every router's CPU and its counters. Rendering /metrics is large with a
// thousand engines, so that it falls outside the window: at a window's start the counters are
// read first (end false), at its end the CPU is (end true).
func sampleArms(arms []*thousandArm, end bool) ([]armSample, error) {
	out := make([]armSample, len(arms))
	if end {
		if err := sampleCPU(arms, out); err != nil {
			return nil, err
		}
	}
	for i, a := range arms {
		sc, err := a.r.Counter("narwhal_engine_scrapes_total", "", `result="ok"`)
		if err != nil {
			return nil, fmt.Errorf("%s: %w", a.name, err)
		}
		ev, err := a.r.Counter("narwhal_kv_events_total", "", `result="batch"`)
		if err != nil {
			return nil, fmt.Errorf("%s: %w", a.name, err)
		}
		out[i].scrapes, out[i].batches = sc[""], ev[""]
	}
	if !end {
		if err := sampleCPU(arms, out); err != nil {
			return nil, err
		}
	}
	return out, nil
}

func sampleCPU(arms []*thousandArm, out []armSample) error {
	for i, a := range arms {
		u, err := harness.ReadUsage(a.r.Proc.Pid())
		if err != nil {
			return fmt.Errorf("%s: %w", a.name, err)
		}
		out[i].at, out[i].use = time.Now(), u
	}
	return nil
}

// thousandLoad sends the light load through the router without load collection and through
// the one following KV events, in alternating windows, every router sampled in each.
func thousandLoad(env harness.Env, sec *report.Section, arms []*thousandArm, size thousandSize) error {
	off, events := arms[0], arms[1]
	client := &http.Client{Timeout: time.Minute, Transport: &http.Transport{MaxIdleConnsPerHost: 256}}
	defer client.CloseIdleConnections()
	type loadStats struct {
		windows             int
		ok, failed          int
		ttft                []time.Duration
		cpuServing          []float64 // the serving router, % of a core
		cpuEventsWhileOther []float64 // the events router while the other serves: ingestion only
		batches             []float64 // the events router's batches applied per second
	}
	per := map[string]*loadStats{off.key: {}, events.key: {}}
	seq := 0
	for w := range size.loadWindows {
		// A B B A …: drift hits both alike.
		target := off
		if w%4 == 1 || w%4 == 2 {
			target = events
		}
		harness.Logf("thousand: load window %d of %d through %q", w+1, size.loadWindows, target.name)
		before, err := sampleArms(arms, false)
		if err != nil {
			return err
		}
		n := max(1, int(size.rate*size.window.Seconds()))
		ttfts, errs := offerEvenly(client, "http://"+target.r.Addr+"/v1/completions", n, size.rate, func() []byte {
			seq++
			return thousandPrompt(seq)
		})
		after, err := sampleArms(arms, true)
		if err != nil {
			return err
		}
		st := per[target.key]
		st.windows++
		st.ok += len(ttfts)
		st.failed += errs
		st.ttft = append(st.ttft, ttfts...)
		idx := map[string]int{}
		for i, a := range arms {
			idx[a.key] = i
		}
		share := func(a *thousandArm) float64 {
			i := idx[a.key]
			return 100 * (after[i].use.CPU - before[i].use.CPU).Seconds() / after[i].at.Sub(before[i].at).Seconds()
		}
		st.cpuServing = append(st.cpuServing, share(target))
		ei := idx[events.key]
		st.batches = append(st.batches, (after[ei].batches-before[ei].batches)/after[ei].at.Sub(before[ei].at).Seconds())
		if target == off {
			st.cpuEventsWhileOther = append(st.cpuEventsWhileOther, share(events))
		}
	}
	t := report.NewTable("load through", "windows", "ok", "failed", "TTFT p50 ms", "TTFT p99 ms", "serving router CPU %", "KV event batches/s (events router)")
	for _, a := range []*thousandArm{off, events} {
		st := per[a.key]
		sort.Slice(st.ttft, func(i, j int) bool { return st.ttft[i] < st.ttft[j] })
		t.Row(a.name, strconv.Itoa(st.windows), strconv.Itoa(st.ok), strconv.Itoa(st.failed), msInt(pct(st.ttft, 0.5)), msInt(pct(st.ttft, 0.99)),
			fmt.Sprintf("%.2f", medianF(st.cpuServing)), report.Num(medianF(st.batches)))
		sec.Figure("load_"+a.key+"_ok", st.ok)
		sec.Figure("load_"+a.key+"_failed", st.failed)
		sec.Figure("load_"+a.key+"_ttft_p99_ms", report.Round(ms1(pct(st.ttft, 0.99)), 1))
		sec.Figure("load_"+a.key+"_cpu_pct", report.Round(medianF(st.cpuServing), 2))
	}
	sec.Printf("light load: %g requests/s open loop (streaming completions, %d-word shared prefix of %d + %d words of its own, %d tokens out), "+
		"%d window(s) of %v alternating between the two routers (A B B A), every router sampled in each", size.rate, thousandPrefixWords,
		thousandPrefixes, thousandOwnWords, thousandTokens, size.loadWindows, size.window)
	sec.Add(t.String())
	if ing := per[off.key].cpuEventsWhileOther; len(ing) > 0 {
		cpu := medianF(ing)
		sec.Printf("KV events flowing while the other router serves the load: the events router ingests %s batches/s at %.2f%% of a core (idle: %.2f%%)",
			report.Num(medianF(per[off.key].batches)), cpu, medianF(events.idle))
		sec.Figure("events_ingesting_cpu_pct", report.Round(cpu, 2))
		sec.Target(report.Target{Name: "load collection, KV events flowing under light load (whole router, not serving)", Value: report.Round(cpu, 2), Unit: "% of a core", Limit: 5})
	}
	if per[off.key].ok+per[events.key].ok == 0 || per[off.key].failed+per[events.key].failed > 0 {
		sec.Printf("NOT SERVING: %d ok, %d failed", per[off.key].ok+per[events.key].ok, per[off.key].failed+per[events.key].failed)
	}
	sec.Target(report.Target{Name: "light load served, no request failed", Boolean: true,
		Value: b2f(per[off.key].ok+per[events.key].ok > 0 && per[off.key].failed+per[events.key].failed == 0)})
	return nil
}

// offerEvenly sends n streaming requests to url at rate per second, evenly spaced (open
// loop), and returns the time to first token of those that succeeded and how many failed.
func offerEvenly(client *http.Client, url string, n int, rate float64, body func() []byte) ([]time.Duration, int) {
	var mu sync.Mutex
	var ttfts []time.Duration
	failed := 0
	var wg sync.WaitGroup
	t0 := time.Now()
	for i := range n {
		if d := time.Until(t0.Add(time.Duration(float64(i) / rate * float64(time.Second)))); d > 0 {
			time.Sleep(d)
		}
		b := body()
		wg.Add(1)
		go func() {
			defer wg.Done()
			ttft, _, err := streamOnce(context.Background(), client, url, b)
			mu.Lock()
			defer mu.Unlock()
			if err != nil {
				failed++
				return
			}
			ttfts = append(ttfts, ttft)
		}()
	}
	wg.Wait()
	return ttfts, failed
}

// thousandPrompt is request i's body: shared prefix i mod thousandPrefixes, then words of its own.
func thousandPrompt(i int) []byte {
	var b strings.Builder
	p := i % thousandPrefixes
	for w := range thousandPrefixWords {
		fmt.Fprintf(&b, "sys%d_%d ", p, w)
	}
	for w := range thousandOwnWords {
		fmt.Fprintf(&b, "q%d_%d ", i, w)
	}
	return fmt.Appendf(nil, `{"model":%q,"prompt":%q,"max_tokens":%d,"stream":true,"stream_options":{"include_usage":true}}`,
		harness.Model, strings.TrimSpace(b.String()), thousandTokens)
}

// thousandProfile saves a CPU profile of a scraping router over one idle window and a heap
// profile of the router without load collection (what a thousand engines cost at rest), and
// shows the top of each.
func thousandProfile(env harness.Env, sec *report.Section, idle, scraping *thousandArm, window time.Duration) {
	file := env.Path("cpu-" + scraping.key + ".pprof")
	if err := <-scraping.r.StartCPUProfile(int(max(window.Seconds(), 1)), file); err != nil {
		sec.Printf("profile of %q: %v", scraping.name, err)
	} else {
		sec.Printf("")
		sec.Printf("CPU profile of the router %q, idle, over %v (%s), top by cumulative:", scraping.name, window, file)
		sec.Add(profileTop(env, file, 25, "-cum"))
	}
	file = env.Path("heap-" + idle.key + ".pprof")
	if err := idle.r.HeapProfile(file); err != nil {
		sec.Printf("heap profile of %q: %v", idle.name, err)
		return
	}
	sec.Printf("")
	sec.Printf("Heap in use of the router %q (%s), top by flat:", idle.name, file)
	sec.Add(profileTop(env, file, 15, "-sample_index=inuse_space"))
}

// medianF is the median of a few values (0 for none).
func medianF(v []float64) float64 {
	if len(v) == 0 {
		return 0
	}
	s := append([]float64(nil), v...)
	sort.Float64s(s)
	return s[len(s)/2]
}
