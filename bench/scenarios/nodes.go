package scenarios

import (
	"fmt"
	"net/http"
	"os"
	"sort"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/narwhal-router/narwhal/bench/goodput"
	"github.com/narwhal-router/narwhal/bench/harness"
	"github.com/narwhal-router/narwhal/bench/report"
	"github.com/narwhal-router/narwhal/bench/sim"
	"github.com/narwhal-router/narwhal/bench/trace"
	"github.com/narwhal-router/narwhal/config"
)

// nodesArm is one arm of the nodes scenario: how many Narwhal nodes share the traffic, and
// whether they place on their own estimate or on the engines' KV events and the prompts'
// tokens (placement.tokens source local: the events' blocks are keyed by their token ids, so
// they match a prompt only through its tokens; events without tokens would match nothing).
type nodesArm struct {
	key, name string
	nodes     int
	tokens    bool
}

var nodesArms = []nodesArm{
	{"auto_1", "estimate, 1 node", 1, false},
	{"auto_3", "estimate, 3 nodes", 3, false},
	{"tokens_1", "events+tokens, 1 node", 1, true},
	{"tokens_3", "events+tokens, 3 nodes", 3, true},
}

// nodesGoal is issue #34's: three nodes on events+tokens within 5% of one node's goodput.
const nodesGoal = 0.95

// nodesRates is the default sweep, requests/s: below, at and past auto's knee on the trace.
func nodesRates(quick bool) []float64 {
	if quick {
		return []float64{20, 40}
	}
	return []float64{20, 30, 40, 50}
}

// nodesRun is one arm at one rate: the goodput figures plus the routers' own prefix count.
type nodesRun struct {
	*goodputRun
	// placedHits and placed are the routers' prefix placements that found a match, and all
	// of them, summed over the nodes.
	placedHits, placed float64
}

// Nodes puts one and three Narwhal nodes (a cluster, each its own process) in front of the
// goodput scenario's fleet — 2 prefill + 4 decode calibrated engines, in this process — and
// offers the public trace at a few rates, a round-robin client spreading the requests over
// the nodes: what splitting the traffic costs the prefix hit rate and the goodput, on each
// node's own estimate of the engines' caches and on their KV events keyed by the prompts'
// tokens (every node follows every engine, so each node's index is the same).
func Nodes(env harness.Env) (*report.Section, error) {
	rates := env.Rates
	if len(rates) == 0 {
		rates = nodesRates(env.Quick)
	}
	return runNodes(env, rates, goodputWindow(env.Quick))
}

func runNodes(env harness.Env, rates []float64, window time.Duration) (*report.Section, error) {
	sec := report.NewSection("nodes", "one node against three behind a round-robin client (2 prefill + 4 decode, calibrated capacity model, the public trace)")
	if _, err := os.Stat(env.Trace); err != nil {
		sec.Printf("SKIPPED: no trace at %s (%v); pass -trace PATH (the repository's copy: %s)", env.Trace, err, trace.DefaultPath)
		return sec, nil
	}
	recs, err := trace.Load(env.Trace)
	if err != nil {
		return nil, err
	}
	rates = append([]float64(nil), rates...)
	sort.Float64s(rates)
	eng := goodputEngine()
	scale := goodputScale(goodputRequests(rates[len(rates)-1], window))
	rep, err := trace.NewReplay(recs, scale)
	if err != nil {
		return nil, err
	}
	slo, how := runSLO(env, eng, rep)
	sec.Printf("rig: the goodput scenario's fleet (a fresh one per run, empty caches) and its SLO: %s (%s)", slo, how)
	sec.Printf("nodes: `narwhal serve` processes, each configured like the goodput scenario's auto + prefix arm (scraping every 0.25 s); " +
		"three form a cluster (static seeds, production timings); the client sends request i to node i mod n")
	sec.Printf("workload: %s; a run at rate r sends the first ⌈r × %v⌉ requests, arrivals rescaled to r; every arm at one rate before the next", rep.Summary(), window)

	runs := map[string][]*nodesRun{}
	for _, rate := range rates {
		reqs, arrivals, err := atRate(rep, rate, window)
		if err != nil {
			return nil, err
		}
		for _, a := range nodesArms {
			harness.Logf("nodes: %s, %g requests/s", a.name, rate)
			r, err := runNodesArm(env, a, eng, rep.Scale.BlockTokens, reqs, arrivals, slo)
			if err != nil {
				return nil, fmt.Errorf("%s at %g/s: %w", a.name, rate, err)
			}
			r.rate = rate
			runs[a.key] = append(runs[a.key], r)
		}
	}

	t := report.NewTable("arm", "offered/s", "failed", "cut off", "TTFT p50 ms", "p90", "p99", "TPOT p99 ms", "SLO met %",
		"engine prefix hit % (cached tokens)", "router prefix hits %")
	rps := map[string]float64{}
	for _, a := range nodesArms {
		var pts []goodput.Point
		hit := map[string]float64{}
		for _, r := range runs[a.key] {
			failed, cut := r.failed()
			routerHits := 0.0
			if r.placed > 0 {
				routerHits = r.placedHits / r.placed
			}
			t.Row(a.name, fmt.Sprintf("%g", r.rate), strconv.Itoa(failed), strconv.Itoa(cut),
				msInt(goodput.Percentile(r.ttft, 0.5)), msInt(goodput.Percentile(r.ttft, 0.9)), msInt(goodput.Percentile(r.ttft, 0.99)),
				fmt.Sprintf("%.1f", ms1(goodput.Percentile(r.tpot, 0.99))), fmt.Sprintf("%.1f", 100*r.attainment),
				fmt.Sprintf("%.1f", 100*r.hitRate), fmt.Sprintf("%.1f", 100*routerHits))
			pts = append(pts, goodput.Point{Rate: r.rate, Attainment: r.attainment})
			hit[strconv.FormatFloat(r.rate, 'g', -1, 64)] = report.Round(100*r.hitRate, 2)
		}
		bad := 0
		for _, r := range runs[a.key] {
			failed, cut := r.failed()
			bad += failed + cut
		}
		sec.Figure(a.key+"_failed", bad)
		g, _ := goodput.Goodput(pts, goodputTarget)
		rps[a.key] = g
		sec.Figure(a.key+"_goodput_rps", report.Round(g, 1))
		sec.Figure(a.key+"_prefix_hit_pct", hit)
	}
	sec.Add(t.String())
	sec.Printf("engine prefix hit %%: the fleet's prompt tokens served from its prefix caches over those looked up (what the simulators report as cached_tokens); " +
		"router prefix hits %%: the nodes' prefix placements that found an engine holding a match (narwhal_prefix_placements_total, summed over the nodes)")

	s := report.NewTable("arm", "goodput req/s (≥ 90% meeting both SLOs, interpolated)", "mean engine prefix hit %", "TTFT p99 ms by offered rate")
	for _, a := range nodesArms {
		sum := 0.0
		var p99 []string
		for _, r := range runs[a.key] {
			sum += r.hitRate
			p99 = append(p99, fmt.Sprintf("%g/s %s", r.rate, msInt(goodput.Percentile(r.ttft, 0.99))))
		}
		mean := sum / float64(max(1, len(runs[a.key])))
		s.Row(a.name, fmt.Sprintf("%.1f", rps[a.key]), fmt.Sprintf("%.1f", 100*mean), strings.Join(p99, ", "))
		sec.Figure(a.key+"_mean_prefix_hit_pct", report.Round(100*mean, 2))
	}
	sec.Add(s.String())
	for _, pair := range [][2]string{{"auto_3", "auto_1"}, {"tokens_3", "tokens_1"}, {"tokens_1", "auto_1"}, {"tokens_3", "auto_3"}} {
		if rps[pair[1]] > 0 {
			sec.Printf("goodput %s ÷ %s: %.2f", pair[0], pair[1], rps[pair[0]]/rps[pair[1]])
			sec.Figure(pair[0]+"_over_"+pair[1]+"_goodput", report.Round(rps[pair[0]]/rps[pair[1]], 2))
		}
	}
	if one := rps["tokens_1"]; one > 0 {
		sec.Target(report.Target{Name: "three nodes on events+tokens: goodput ÷ one node's", Value: report.Round(rps["tokens_3"]/one, 2),
			Unit: "×", Limit: nodesGoal, AtLeast: true})
	}
	return sec, nil
}

// runNodesArm starts a fresh fleet and arm a's nodes in front of it, offers reqs round robin
// over the nodes and measures what the fleet and the nodes saw.
func runNodesArm(env harness.Env, a nodesArm, e sim.Options, blockWords int, reqs []trace.Request, arrivals []time.Duration, slo goodput.SLO) (*nodesRun, error) {
	if a.tokens {
		e.KVEvents, e.KVEventsReplay = "tcp://127.0.0.1:0", "tcp://127.0.0.1:0"
	}
	fleet, err := sim.StartFleet(sim.FleetOptions{Prefill: 2, Decode: 4, Engine: e})
	if err != nil {
		return nil, fmt.Errorf("fleet: %w", err)
	}
	defer fleet.Close()
	engines := simEngines(fleet.Engines)
	p := fleetPolicy{Disaggregation: config.DisaggAuto, Placement: config.PlacePrefix, ScrapeS: 0.25}
	if a.tokens {
		p.KVEvents, p.Tokens = true, config.TokensLocal
	} else {
		for i := range engines {
			engines[i].KVEvents = config.EngineKVEvents{}
		}
	}
	cfg := fleetRouterConfig(p, blockWords, engines)
	cfg.Log.AccessLog = false
	var binds []string
	if a.nodes > 1 {
		for range a.nodes {
			b, err := harness.FreeClusterAddr()
			if err != nil {
				return nil, err
			}
			binds = append(binds, b)
		}
	}
	nodes := make([]*harness.Router, a.nodes)
	errs := make([]error, a.nodes)
	var wg sync.WaitGroup
	for i := range a.nodes {
		c := cfg
		if a.nodes > 1 {
			c.Cluster.Enabled, c.Cluster.Name, c.Cluster.NodeName = true, "bench-nodes", "node-"+strconv.Itoa(i)
			c.Cluster.Bind, c.Cluster.Seeds = binds[i], binds
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			nodes[i], _, errs[i] = harness.StartServe(env, fmt.Sprintf("%s-node-%d", a.key, i), c, 30*time.Second)
		}()
	}
	wg.Wait()
	defer func() {
		for _, n := range nodes {
			if n != nil {
				n.Proc.Stop(5 * time.Second)
			}
		}
	}()
	for _, err := range errs {
		if err != nil {
			return nil, err
		}
	}
	if a.nodes > 1 {
		if err := waitClusterFormed(nodes, 20*time.Second); err != nil {
			return nil, err
		}
	}
	urls := make([]string, len(nodes))
	for i, n := range nodes {
		urls[i] = "http://" + n.Addr + "/v1/completions"
	}
	client := &http.Client{Timeout: 3 * time.Minute, Transport: &http.Transport{MaxIdleConnsPerHost: 2048}}
	defer client.CloseIdleConnections()
	r := &nodesRun{goodputRun: offerTrace(client, urls, reqs, arrivals, slo)}
	var hits, total int64
	for _, eng := range fleet.Engines {
		st := eng.Stats()
		hits += st.PrefixCacheHits
		total += st.PrefixCacheQueries
	}
	if total > 0 {
		r.hitRate = float64(hits) / float64(total)
	}
	for _, n := range nodes {
		byResult, err := n.Counter("narwhal_prefix_placements_total", "result")
		if err != nil {
			return nil, err
		}
		for res, v := range byResult {
			r.placed += v
			if res == "hit" {
				r.placedHits += v
			}
		}
	}
	return r, nil
}

// waitClusterFormed waits until every node lists all of them as members.
func waitClusterFormed(nodes []*harness.Router, within time.Duration) error {
	deadline := time.Now().Add(within)
	for {
		formed := true
		for _, n := range nodes {
			if m, err := n.Members(); err != nil || m < len(nodes) {
				formed = false
				break
			}
		}
		if formed {
			return nil
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("a cluster of %d did not form within %v", len(nodes), within)
		}
		time.Sleep(50 * time.Millisecond)
	}
}
