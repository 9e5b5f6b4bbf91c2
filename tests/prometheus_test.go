package tests

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"math"
	"net/http"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/narwhal-router/narwhal/bench/sim"
	"github.com/narwhal-router/narwhal/config"
	"github.com/narwhal-router/narwhal/messages"
)

// The Prometheus dashboard (docs/dashboards/narwhal-prometheus.json) proven against the real
// thing: Debian's prometheus server scrapes a real `narwhal serve` process through its admin
// token while the test drives the traffic an on-call engineer looks at — successes decoded
// locally and disaggregated, prefix hits, engine faults and a retry, a refused and a missing
// handoff, an exhausted retry budget, an admission timeout, ejections, probes and the cluster
// verdicts they publish — and then every query of every panel runs through Prometheus's HTTP
// API, as Grafana would run it with "All" selected: each must parse and return a number.

// promScrapeInterval is how often the test's Prometheus scrapes Narwhal (NARWHAL_TEST_SCRAPE_INTERVAL
// overrides it, as a Go duration): short, so that the test waits little for samples.
func promScrapeInterval(t *testing.T) time.Duration {
	if s := os.Getenv("NARWHAL_TEST_SCRAPE_INTERVAL"); s != "" {
		d, err := time.ParseDuration(s)
		if err != nil || d <= 0 {
			t.Fatalf("NARWHAL_TEST_SCRAPE_INTERVAL=%q: want a positive Go duration", s)
		}
		return d
	}
	return 250 * time.Millisecond
}

// dashboardPanel is one panel's queries, as the dashboard JSON has them.
type dashboardPanel struct {
	Title   string `json:"title"`
	Type    string `json:"type"`
	Targets []struct {
		RefID string `json:"refId"`
		Expr  string `json:"expr"`
	} `json:"targets"`
}

// prometheusDashboard reads the dashboard and returns its panels with their queries as
// Prometheus runs them: each template variable at its "All" value, Grafana's interval
// variables at window, and nothing left that Prometheus would not parse.
func prometheusDashboard(t *testing.T, window string) []dashboardPanel {
	t.Helper()
	var d struct {
		Panels     []dashboardPanel `json:"panels"`
		Templating struct {
			List []struct {
				Name       string `json:"name"`
				Type       string `json:"type"`
				IncludeAll bool   `json:"includeAll"`
				AllValue   string `json:"allValue"`
			} `json:"list"`
		} `json:"templating"`
	}
	if err := json.Unmarshal(readRepoFile(t, "docs/dashboards/narwhal-prometheus.json"), &d); err != nil {
		t.Fatalf("docs/dashboards/narwhal-prometheus.json: %v", err)
	}
	pairs := []string{"$__rate_interval", window, "$__interval", "15s", "$__range", window}
	for _, v := range d.Templating.List {
		if v.Type != "query" {
			continue
		}
		if !v.IncludeAll || v.AllValue == "" {
			t.Fatalf("dashboard variable %s has no All value to evaluate the queries with", v.Name)
		}
		pairs = append(pairs, "$"+v.Name, v.AllValue)
	}
	subst := strings.NewReplacer(pairs...)
	var out []dashboardPanel
	for _, p := range d.Panels {
		if p.Type == "row" {
			continue
		}
		if len(p.Targets) == 0 {
			t.Fatalf("panel %q has no query", p.Title)
		}
		for i := range p.Targets {
			p.Targets[i].Expr = subst.Replace(p.Targets[i].Expr)
			if strings.Contains(p.Targets[i].Expr, "$") {
				t.Fatalf("panel %q: a variable the test cannot resolve in %s", p.Title, p.Targets[i].Expr)
			}
		}
		out = append(out, p)
	}
	if len(out) < 15 {
		t.Fatalf("the Prometheus dashboard has only %d panels", len(out))
	}
	return out
}

// promServer is a running Debian prometheus.
type promServer struct {
	t    *testing.T
	base string
	log  *syncBuffer
}

// startPrometheus runs prometheus scraping target's /metrics every interval with the bearer
// token given, and waits until it is ready.
func startPrometheus(t *testing.T, bin, target, token string, interval time.Duration) *promServer {
	t.Helper()
	dir := t.TempDir()
	conf := fmt.Sprintf(`global:
  scrape_interval: %[1]s
  scrape_timeout: %[1]s
scrape_configs:
  - job_name: narwhal
    authorization:
      credentials: %[2]q
    static_configs:
      - targets: [%[3]q]
`, interval, token, target)
	path := filepath.Join(dir, "prometheus.yml")
	if err := os.WriteFile(path, []byte(conf), 0o600); err != nil {
		t.Fatal(err)
	}
	listen := freeTCPAddr(t)
	p := &promServer{t: t, base: "http://" + listen, log: &syncBuffer{}}
	cmd := exec.Command(bin, "--config.file="+path, "--storage.tsdb.path="+filepath.Join(dir, "data"),
		"--web.listen-address="+listen, "--log.level=warn")
	cmd.Stdout, cmd.Stderr = p.log, p.log
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		stopProcess(cmd, 10*time.Second)
		if t.Failed() {
			t.Logf("prometheus log:\n%s", p.log.Bytes())
		}
	})
	eventually(t, 20*time.Second, func() bool {
		resp, err := http.Get(p.base + "/-/ready")
		if err != nil {
			return false
		}
		resp.Body.Close()
		return resp.StatusCode == 200
	}, func() string { return "prometheus not ready within 20 s:\n" + string(p.log.Bytes()) })
	return p
}

// promSample is one element of an instant query's result.
type promSample struct {
	Metric map[string]string `json:"metric"`
	Value  [2]any            `json:"value"`
}

func (s promSample) value() float64 {
	str, _ := s.Value[1].(string)
	v, err := strconv.ParseFloat(str, 64)
	if err != nil {
		return math.NaN()
	}
	return v
}

// query runs expr as an instant query through the HTTP API; err is Prometheus's own error
// (a query that does not parse, for one).
func (p *promServer) query(expr string) ([]promSample, error) {
	resp, err := http.PostForm(p.base+"/api/v1/query", url.Values{"query": {expr}})
	if err != nil {
		return nil, err
	}
	defer resp.Body.Close()
	var r struct {
		Status    string `json:"status"`
		ErrorType string `json:"errorType"`
		Error     string `json:"error"`
		Data      struct {
			ResultType string       `json:"resultType"`
			Result     []promSample `json:"result"`
		} `json:"data"`
	}
	b, _ := io.ReadAll(resp.Body)
	if err := json.Unmarshal(b, &r); err != nil {
		return nil, fmt.Errorf("%d %s", resp.StatusCode, b)
	}
	if r.Status != "success" {
		return nil, fmt.Errorf("%s: %s", r.ErrorType, r.Error)
	}
	if r.Data.ResultType != "vector" {
		return nil, fmt.Errorf("result type %s, want an instant vector", r.Data.ResultType)
	}
	return r.Data.Result, nil
}

// scalar is the sum of expr's samples (NaN: none).
func (p *promServer) scalar(expr string) float64 {
	res, err := p.query(expr)
	if err != nil || len(res) == 0 {
		return math.NaN()
	}
	sum := 0.0
	for _, s := range res {
		sum += s.value()
	}
	return sum
}

// servedNode is the dashboard test's router process (its admin listener needs a token), with
// client requests a context cancels.
type servedNode struct{ *narwhalNode }

// allAdmitted waits until every engine is back in placement (ejections end with a probe).
func (n *servedNode) allAdmitted() {
	n.t.Helper()
	var es []messages.EngineState
	eventually(n.t, 10*time.Second, func() bool {
		n.getJSON("/engines", &es)
		for _, e := range es {
			if e.State != "admitted" {
				return false
			}
		}
		return true
	}, func() string { return fmt.Sprintf("engines not all admitted: %+v", es) })
}

// post sends body and returns the status; the response is read whole.
func (n *servedNode) post(ctx context.Context, path, body string) int {
	n.t.Helper()
	req, _ := http.NewRequestWithContext(ctx, "POST", n.api+path, strings.NewReader(body))
	req.Header.Set("Content-Type", "application/json")
	resp, err := n.client.Do(req)
	if err != nil {
		if ctx.Err() != nil {
			return 0
		}
		n.t.Fatalf("POST %s: %v", path, err)
	}
	defer resp.Body.Close()
	io.Copy(io.Discard, resp.Body)
	return resp.StatusCode
}

func TestPrometheusDashboardQueriesReturnData(t *testing.T) {
	if testing.Short() {
		t.Skip("runs narwhal serve and prometheus")
	}
	rig := startDashboardRig(t)
	fleet, n, prom := rig.fleet, rig.node, rig.prom

	// A round of traffic; the second round makes every counter and histogram grow between two
	// scrapes, so that rates and quantiles over the window are numbers, not NaN.
	ctx := context.Background()
	sent := 0
	long := func(tag string) string {
		return tag + " explain how a disaggregated router moves the prompt's KV cache from the producer to the consumer engine"
	}
	round := func(r int) {
		t.Helper()
		expect := func(want, got int, what string) {
			t.Helper()
			sent++
			if got != want {
				t.Fatalf("round %d, %s: status %d, want %d", r, what, got, want)
			}
		}
		expect(200, n.post(ctx, "/v1/chat/completions", chat("hi", true)), "a short prompt (decoded locally)")
		expect(200, n.post(ctx, "/v1/completions", completion(long(fmt.Sprintf("round-%d", r)), false)), "a long prompt (disaggregated)")
		for range 2 { // the same long prompt again: prefix hits, cached prompt tokens
			expect(200, n.post(ctx, "/v1/chat/completions", chat(long("shared"), true)), "a repeated long prompt")
		}
		expect(404, n.post(ctx, "/v1/completions", `{"model":"nope","prompt":"x"}`), "an unknown model")
		expect(200, n.post(ctx, "/v1/completions", completion(long(fmt.Sprintf("missing-%d @sim:prefill.bad_descriptor=null", r)), true)),
			"a prefill without a descriptor (recomputed)")

		// One consumer's next decode fails: the request is retried on the other (while the budget
		// lasts) and the failed consumer is ejected, probed and readmitted.
		d0 := fleet.Engine("d0")
		before := d0.Stats().DecodeRequests
		d0.InjectFault("decode.status=500", 1)
		for i := 0; d0.Stats().DecodeRequests == before; i++ {
			if i == 20 {
				t.Fatal("no request reached d0")
			}
			sent++
			n.post(ctx, "/v1/completions", completion(long(fmt.Sprintf("fault-%d-%d", r, i)), true))
		}
		d0.ClearFaults()
		n.allAdmitted()
		sent++ // a handoff the router refuses: the producer is ejected and probed back
		n.post(ctx, "/v1/completions", completion(long(fmt.Sprintf("bad-%d @sim:prefill.bad_descriptor=bad_blocks", r)), false))
		n.allAdmitted()

		// The producer busy with a prefill that never answers: the next long prompt waits in the
		// admission queue until admission.queue_timeout_s.
		parked, cancel := context.WithCancel(ctx)
		done := make(chan struct{})
		go func() {
			defer close(done)
			n.post(parked, "/v1/completions", completion(long(fmt.Sprintf("hold-%d @sim:prefill.hang_headers", r)), true))
		}()
		eventually(t, 5*time.Second, func() bool { return fleet.Engine("p0").Stats().InFlight == 1 }, func() string { return "the holder never reached p0" })
		expect(503, n.post(ctx, "/v1/completions", completion(long(fmt.Sprintf("queued-%d", r)), false)), "a request queued behind a full producer")
		cancel()
		<-done
		sent++
		n.allAdmitted()
	}
	waitForRound := func(r int) {
		t.Helper()
		eventually(t, 20*time.Second, func() bool { return prom.scalar(`sum(narwhal_requests_total)`) >= float64(sent) },
			func() string {
				return fmt.Sprintf("after round %d prometheus has %v requests, want %d", r, prom.scalar(`sum(narwhal_requests_total)`), sent)
			})
	}
	round(1)
	waitForRound(1)
	round(2)
	waitForRound(2)

	rig.everyPanelHasData(t)
}

// dashboardRig is a real `narwhal serve` in front of a simulated fleet (one producer, at most
// one prefill at a time, and two consumers), a cluster of one so that its breakers' verdicts are
// published, and Debian's prometheus scraping it.
type dashboardRig struct {
	fleet  *sim.Fleet
	node   servedNode
	prom   *promServer
	panels []dashboardPanel
}

func startDashboardRig(t *testing.T) dashboardRig {
	t.Helper()
	promBin, err := exec.LookPath("prometheus")
	if err != nil {
		t.Skip("prometheus is not installed (Debian: apt-get install prometheus; .ci/run does it): the dashboard's queries are not run")
	}
	interval := promScrapeInterval(t)
	panels := prometheusDashboard(t, "1m")

	// One producer (at most one prefill at a time, so that a second long prompt waits in the
	// queue) and two consumers; the capacity model's prefix cache reports cached tokens.
	fleet, err := sim.StartFleet(sim.FleetOptions{Prefill: 1, Decode: 2, Engine: sim.Options{
		Models: []string{"sim-model"}, TTFT: 5 * time.Millisecond, ITL: 2 * time.Millisecond, Tokens: 4,
		MaxNumSeqs: 16, BlockSize: 4, PromptTokensDetails: true,
	}})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { fleet.Close() })

	const token = "prometheus-scrapes-with-this"
	cfg := config.Default()
	cfg.Engines = fleetEngines(fleet)
	cfg.Engines[0].MaxInflight = 1
	pinContract(&cfg)
	cfg.Log.AccessLog = false
	cfg.Server.Listen, cfg.Server.AdminListen, cfg.Server.AdminToken = freeTCPAddr(t), freeTCPAddr(t), token
	cfg.Server.ShutdownGraceS = 1
	cfg.Engine.FirstTokenTimeoutS = 2
	cfg.Disaggregation.MinPromptTokens, cfg.Disaggregation.MaxLocalPromptTokens = 8, 8
	cfg.Placement.PrefixBlockWords = 4
	cfg.Recovery.MaxAttempts, cfg.Recovery.EjectAfter = 2, 1
	cfg.Recovery.RetryBudget = config.RetryBudget{Ratio: 0, MinPerS: 0.1, WindowS: 10} // one retry per 10 s
	cfg.Recovery.ProbeIntervalS, cfg.Recovery.ProbeMaxIntervalS = 0.05, 0.1
	cfg.Admission.QueueTimeoutS = 0.2
	bind := freeClusterAddr(t) // a cluster of one: its breakers' verdicts are published
	cl := &cfg.Cluster
	cl.Enabled, cl.Name, cl.NodeName, cl.Bind, cl.Seeds = true, "prom", "node-0", bind, []string{bind}
	n := servedNode{routerProcess(t, cfg)}

	prom := startPrometheus(t, promBin, cfg.Server.AdminListen, token, interval)
	eventually(t, 20*time.Second, func() bool { return prom.scalar(`up{job="narwhal"}`) == 1 },
		func() string {
			return "prometheus never scraped narwhal with its token (up != 1):\n" + string(prom.log.Bytes())
		})

	return dashboardRig{fleet: fleet, node: n, prom: prom, panels: panels}
}

// everyPanelHasData runs every query of every panel until each parses and returns at least one
// number (a panel showing "No data" fails), and logs what they returned.
func (rig dashboardRig) everyPanelHasData(t *testing.T) {
	t.Helper()
	panels, prom := rig.panels, rig.prom
	type failure struct{ panel, expr, why string }
	var failures []failure
	results := map[string]string{}
	eventually(t, 30*time.Second, func() bool {
		failures = failures[:0]
		for _, p := range panels {
			for _, tg := range p.Targets {
				res, err := prom.query(tg.Expr)
				var values []string
				for _, s := range res {
					if v := s.value(); !math.IsNaN(v) {
						values = append(values, fmt.Sprintf("%s=%.4g", labelsOf(s.Metric), v))
					}
				}
				sort.Strings(values)
				switch {
				case err != nil:
					failures = append(failures, failure{p.Title, tg.Expr, err.Error()})
				case len(res) == 0:
					failures = append(failures, failure{p.Title, tg.Expr, "no data"})
				case len(values) == 0:
					failures = append(failures, failure{p.Title, tg.Expr, "only NaN"})
				}
				results[p.Title+" ["+tg.RefID+"]"] = strings.Join(values, " ")
			}
		}
		return len(failures) == 0
	}, func() string {
		var b strings.Builder
		for _, f := range failures {
			fmt.Fprintf(&b, "panel %q: %s\n    %s\n", f.panel, f.why, f.expr)
		}
		return b.String()
	})
	keys := make([]string, 0, len(results))
	for k := range results {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	for _, k := range keys {
		t.Logf("%s: %s", k, results[k])
	}
}

// stopProcess stops cmd with SIGTERM and waits for it; one still running after grace is killed.
// It says whether the process exited within grace, and what its Wait returned.
func stopProcess(cmd *exec.Cmd, grace time.Duration) (exited bool, err error) {
	cmd.Process.Signal(syscall.SIGTERM)
	done := make(chan error, 1)
	go func() { done <- cmd.Wait() }()
	select {
	case err := <-done:
		return true, err
	case <-time.After(grace):
		cmd.Process.Kill()
		return false, <-done
	}
}

// labelsOf renders a sample's labels as {a="b",...}, sorted, without __name__.
func labelsOf(m map[string]string) string {
	var kv []string
	for k, v := range m {
		if k != "__name__" {
			kv = append(kv, k+"="+strconv.Quote(v))
		}
	}
	sort.Strings(kv)
	return "{" + strings.Join(kv, ",") + "}"
}
