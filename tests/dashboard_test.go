package tests

import (
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"sort"
	"strings"
	"testing"
	"time"

	"github.com/narwhal-router/narwhal/bench/sim"
	"github.com/narwhal-router/narwhal/config"
)

// graphitePath finds the metric paths in a Graphite target expression.
var graphitePath = regexp.MustCompile(`stats\.(counters|timers|gauges)\.([A-Za-z0-9_.*-]+)`)

// statsd's Graphite backend appends these to a timer's or counter's name.
var aggregateSuffix = regexp.MustCompile(`\.(rate|count|upper_\d+|mean|mean_\d+|upper|lower|median|sum|count_ps|std)$`)

// dashboardQueries returns each (statsd type, name pattern) the dashboard queries.
func dashboardQueries(t *testing.T) map[string]string {
	b, err := os.ReadFile(filepath.Join("..", "docs", "dashboards", "narwhal-statsd.json"))
	if err != nil {
		t.Fatal(err)
	}
	var d struct {
		Panels []struct {
			Title   string `json:"title"`
			Targets []struct {
				Target string `json:"target"`
			} `json:"targets"`
		} `json:"panels"`
	}
	if err := json.Unmarshal(b, &d); err != nil {
		t.Fatal(err)
	}
	out := map[string]string{}
	for _, p := range d.Panels {
		for _, tg := range p.Targets {
			for _, m := range graphitePath.FindAllStringSubmatch(tg.Target, -1) {
				name := m[2]
				typ := map[string]string{"counters": "c", "timers": "ms", "gauges": "g"}[m[1]]
				if typ != "g" {
					name = aggregateSuffix.ReplaceAllString(name, "")
				}
				out[name] = typ
			}
		}
	}
	if len(out) < 15 {
		t.Fatalf("the dashboard queries only %d metrics", len(out))
	}
	return out
}

// TestDashboardQueriesOnlyMetricsNarwhalEmits runs traffic that exercises every metric —
// successes, a retry, an exhausted retry budget, a rejected and a missing descriptor, ejections
// and probes, a whole-wave restart, queueing and an admission timeout, a hang-up — and then checks
// that every metric the Grafana dashboard queries matches one Narwhal really sent to statsd.
func TestDashboardQueriesOnlyMetricsNarwhalEmits(t *testing.T) {
	sink := newStatsdSink(t)
	h := start(t, setup{prefill: 1, decode: 2, engine: sim.Options{Tokens: 3}, config: func(c *config.Config) {
		withStatsd(sink)(c)
		pinContract(c)
		c.Recovery.MaxAttempts = 2
		c.Recovery.RetryBudget = config.RetryBudget{Ratio: 0, MinPerS: 0.1, WindowS: 10} // one retry per 10 s
		c.Recovery.EjectAfter = 1
		c.Recovery.ProbeIntervalS, c.Recovery.ProbeMaxIntervalS = 0.05, 0.1
		c.Engine.FirstTokenTimeoutS = 0.3
		c.Admission.QueueTimeoutS = 0.2
		c.Engines[0].MaxInflight = 1
	}})
	allAdmitted := func() {
		t.Helper()
		for _, n := range []string{"p0", "d0", "d1"} {
			h.waitState(n, "admitted", 5*time.Second)
		}
	}
	post := func(body string) int {
		resp, _ := h.post("/v1/completions", body)
		return resp.StatusCode
	}

	post(`{"model":"sim-model","prompt":"a","stream":true}`)
	h.post("/v1/chat/completions", `{"model":"sim-model","messages":[{"role":"user","content":"a"}]}`)

	h.fleet.Engine("d0").InjectFault("decode.hang_first_token", 1) // a retry on d1
	h.fleet.Engine("d1").InjectFault("decode.hang_first_token", 1)
	for post(`{"model":"sim-model","prompt":"retry me"}`) == 200 && h.fleet.Engine("d0").Stats().Aborted+h.fleet.Engine("d1").Stats().Aborted < 2 {
	}
	allAdmitted()
	post(`{"model":"sim-model","prompt":"@sim:prefill.bad_descriptor=bad_blocks"}`) // rejected; budget already spent
	allAdmitted()
	post(`{"model":"sim-model","prompt":"@sim:prefill.bad_descriptor=null"}`) // recompute
	allAdmitted()

	p := h.park("holder", `{"model":"sim-model","prompt":"@sim:prefill.hang_headers","stream":true}`, false)
	eventually(t, 3*time.Second, func() bool { return h.fleet.Engine("p0").Stats().InFlight == 1 }, func() string { return "holder not in prefill" })
	if code := post(`{"model":"sim-model","prompt":"queued"}`); code != 503 { // p0 is full: queue, then time out
		t.Fatalf("queued request: %d", code)
	}
	p.hangUp()

	for _, d := range h.fleet.ByRole(sim.RoleDecode) {
		d.InjectFault("decode.status=500", 0)
	}
	// Until both are ejected: the fleet served a moment ago, so the failures wait up to
	// recovery.blame_window_s for evidence that they are the prompt's.
	for deadline := time.Now().Add(5 * time.Second); time.Now().Before(deadline) &&
		(h.engine("d0").State == "admitted" || h.engine("d1").State == "admitted"); {
		post(`{"model":"sim-model","prompt":"wave"}`)
	}
	eventually(t, 3*time.Second, func() bool { return sink.sum("narwhal.wave_restarts.role.decode") > 0 },
		func() string { return "no wave restart reported" })
	for _, d := range h.fleet.ByRole(sim.RoleDecode) {
		d.ClearFaults()
	}
	allAdmitted()

	// Counters reach statsd at the next flush: wait until every queried metric was sent, and
	// report those that never were.
	queries := dashboardQueries(t)
	catalog := readmeCatalog(t)
	for pattern := range queries {
		if base, _, _ := strings.Cut(strings.TrimPrefix(pattern, "narwhal."), "."); !catalog[base] {
			t.Errorf("the dashboard queries %s, which is not in the README's metric catalog", pattern)
		}
	}
	var missing []string
	eventually(t, 5*time.Second, func() bool { missing = unsentQueries(sink, queries); return len(missing) == 0 },
		func() string {
			return "the dashboard queries metrics Narwhal never sent:\n" + strings.Join(missing, "\n")
		})
}

// unsentQueries returns, for each metric the dashboard queries that the sink never received,
// a line naming it and the similar names that were sent.
func unsentQueries(sink *statsdSink, queries map[string]string) []string {
	emitted := map[string]map[string]bool{} // type → names
	sink.mu.Lock()
	for _, l := range sink.lines {
		name, rest, _ := strings.Cut(l, ":")
		_, typ, _ := strings.Cut(rest, "|")
		typ, _, _ = strings.Cut(typ, "|")
		name = strings.TrimPrefix(name, "narwhal.")
		if emitted[typ] == nil {
			emitted[typ] = map[string]bool{}
		}
		emitted[typ][name] = true
	}
	sink.mu.Unlock()

	var missing []string
	for pattern, typ := range queries {
		name := strings.TrimPrefix(pattern, "narwhal.")
		re := regexp.MustCompile("^" + strings.ReplaceAll(regexp.QuoteMeta(name), `\*`, `[^.]+`) + "$")
		found := false
		for n := range emitted[typ] {
			if re.MatchString(n) {
				found = true
				break
			}
		}
		if !found {
			var similar []string
			for n := range emitted[typ] {
				if strings.HasPrefix(n, strings.SplitN(name, ".", 2)[0]) {
					similar = append(similar, n)
				}
			}
			sort.Strings(similar)
			missing = append(missing, fmt.Sprintf("%s (%s); sent: %v", pattern, typ, similar))
		}
	}
	sort.Strings(missing)
	return missing
}
