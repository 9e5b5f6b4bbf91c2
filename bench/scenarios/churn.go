package scenarios

import (
	"fmt"
	"sync"
	"time"

	json "github.com/goccy/go-json"

	"github.com/narwhal-router/narwhal/bench/harness"
	"github.com/narwhal-router/narwhal/bench/loadgen"
	"github.com/narwhal-router/narwhal/bench/report"
)

// churnEvery is how often the churn windows add or remove an engine.
const churnEvery = time.Second

// Churn measures a fleet that changes under load: the router starts with 2 prefill and 3
// decode engines of a `narwhal sim fleet` of 2 + 6, and in the churn windows one of the other
// three decode engines is added or removed through the admin API every second (each added one
// joins after its check; each removed one drains), so the decode tier swings between 3 and 6
// engines. The static windows, interleaved with them in the same run, hold the 3 listed
// decoders. Every request of either kind must succeed; what the churn costs is the difference in
// first-byte latency and in router CPU per request.
func Churn(env harness.Env) (*report.Section, error) {
	sec := report.NewSection("churn", fmt.Sprintf(
		"decode engines added and removed through the admin API every %v under load, beside a static fleet", churnEvery))
	rc := harness.DefaultRouterConfig()
	rc.ProbeIntervalS = 0.25
	rig, err := harness.StartRig(env, harness.RigOptions{
		Fleet:  harness.FleetOptions{Prefill: 2, Decode: 6, TTFT: 20 * time.Millisecond, ITL: 5 * time.Millisecond, Tokens: 64},
		Router: rc,
		Listed: func(all []loadgen.Engine) []loadgen.Engine {
			var out []loadgen.Engine
			for _, e := range all {
				if e.Role == "prefill" || e.Name < "d3" {
					out = append(out, e)
				}
			}
			return out
		},
	})
	if err != nil {
		return nil, err
	}
	defer rig.Close()
	var churned []loadgen.Engine
	for _, e := range rig.Fleet.Engines {
		if e.Role == "decode" && e.Name >= "d3" {
			churned = append(churned, e)
		}
	}
	ch := &churner{router: rig.Router, engines: churned, present: map[string]bool{}}

	phase := func(name string, d time.Duration) loadgen.Phase {
		return loadgen.Phase{Name: name, Arm: loadgen.Routed, Mode: loadgen.Closed, Concurrency: overheadConcurrency,
			Duration: env.Scale(d), MaxTokens: overheadTokens, PromptWords: promptWords, Guard: 30 * time.Second}
	}
	harness.Logf("churn: warming up")
	if _, err := rig.Run(phase("warmup", 2*time.Second)); err != nil {
		return nil, err
	}
	const pairs = 6
	harness.Logf("churn: %d interleaved pairs of windows, static and churning", pairs)
	var static, churning []harness.Window
	for i := range pairs {
		if err := ch.restore(); err != nil {
			return nil, err
		}
		w, err := rig.Run(phase(fmt.Sprintf("static-%d", i), 3*time.Second))
		if err != nil {
			return nil, err
		}
		static = append(static, w)
		ch.start()
		w, err = rig.Run(phase(fmt.Sprintf("churn-%d", i), 3*time.Second))
		ch.stop()
		if err != nil {
			return nil, err
		}
		churning = append(churning, w)
	}
	if err := ch.restore(); err != nil {
		return nil, err
	}
	s, c := harness.Merge(static...), harness.Merge(churning...)
	sr, cr := &s.Result, &c.Result
	sfb, cfb := loadgen.Summarize(sr.FirstByte), loadgen.Summarize(cr.FirstByte)
	perReq := func(w harness.Window) float64 {
		return float64(w.Router.CPU.Microseconds()) / float64(max(w.Result.Sent, 1))
	}
	failed := func(r *loadgen.Result) int { return r.Sent - r.OK }

	t := report.NewTable("", "static fleet (3 decoders)", "churning (3–6 decoders)", "churning − static")
	t.Row("requests", report.Num(float64(sr.Sent)), report.Num(float64(cr.Sent)), "")
	t.Row("failed requests", report.Num(float64(failed(sr))), report.Num(float64(failed(cr))), report.Signed(float64(failed(cr)-failed(sr))))
	t.Row("outcome violations", report.Num(float64(sr.ViolationCount())), report.Num(float64(cr.ViolationCount())), "")
	t.Row("requests/s", report.Num(sr.Rate()), report.Num(cr.Rate()), report.Signed(cr.Rate()-sr.Rate()))
	t.Row("first_byte p50 (ms)", ms(sfb.P50), ms(cfb.P50), report.Signed(loadgen.Ms(cfb.P50-sfb.P50)))
	t.Row("first_byte p99 (ms)", ms(sfb.P99), ms(cfb.P99), report.Signed(loadgen.Ms(cfb.P99-sfb.P99)))
	t.Row("router CPU per request (µs)", report.Num(perReq(s)), report.Num(perReq(c)), report.Signed(perReq(c)-perReq(s)))
	sec.Add(t.String())
	sec.Printf("fleet changes in the churn windows: %d added, %d removed (admin API errors: %d)", ch.added, ch.removed, len(ch.errs))
	for _, e := range ch.errs[:min(len(ch.errs), 5)] {
		sec.Printf("  admin API: %s", e)
	}
	if n := sr.ErrorCount() + cr.ErrorCount(); n > 0 {
		sec.Printf("errors: static %s, churning %s", mix(sr.Errors), mix(cr.Errors))
	}

	sec.Figure("churn_failed_requests", failed(cr))
	sec.Figure("static_failed_requests", failed(sr))
	sec.Figure("churn_fleet_changes", ch.added+ch.removed)
	sec.Figure("churn_first_byte_p99_ms", loadgen.Ms(cfb.P99))
	sec.Figure("static_first_byte_p99_ms", loadgen.Ms(sfb.P99))
	sec.Figure("churn_added_first_byte_p99_ms", loadgen.Ms(cfb.P99-sfb.P99))
	sec.Figure("churn_router_cpu_us_per_request", perReq(c))
	sec.Figure("static_router_cpu_us_per_request", perReq(s))
	sec.Target(report.Target{Name: "no request fails while the fleet churns", Boolean: true,
		Value: b2f(failed(cr) == 0 && cr.ViolationCount() == 0 && len(ch.errs) == 0)})
	return sec, nil
}

// churner adds and removes engines through the router's admin API, one every churnEvery, in
// turn: each absent one is added, each present one removed.
type churner struct {
	router  *harness.Router
	engines []loadgen.Engine
	present map[string]bool
	next    int

	mu             sync.Mutex
	added, removed int
	errs           []string
	quit, done     chan struct{}
}

func (c *churner) start() {
	c.quit, c.done = make(chan struct{}), make(chan struct{})
	go func() {
		defer close(c.done)
		t := time.NewTicker(churnEvery)
		defer t.Stop()
		for {
			select {
			case <-c.quit:
				return
			case <-t.C:
				c.flip(c.engines[c.next%len(c.engines)])
				c.next++
			}
		}
	}()
}

func (c *churner) stop() {
	close(c.quit)
	<-c.done
}

// restore removes every churned engine, so a static window runs the listed fleet.
func (c *churner) restore() error {
	for _, e := range c.engines {
		if c.present[e.Name] {
			c.flip(e)
		}
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	if len(c.errs) > 0 {
		return fmt.Errorf("churn: the admin API refused a change: %s", c.errs[0])
	}
	// The removed engines drain while the static window runs: they take no new request.
	return nil
}

// flip adds e when absent, removes it when present.
func (c *churner) flip(e loadgen.Engine) {
	var code int
	var body []byte
	var err error
	if c.present[e.Name] {
		code, body, err = c.router.Do("DELETE", "/engines/"+e.Name, "")
	} else {
		spec, _ := json.Marshal(map[string]any{"name": e.Name, "url": e.URL, "role": e.Role, "models": []string{harness.Model},
			"kv": map[string]any{"connector": "nixl", "engine_id": e.EngineID, "endpoint": e.KVEndpoint}})
		code, body, err = c.router.Do("POST", "/engines", string(spec))
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	switch {
	case err != nil:
		c.errs = append(c.errs, err.Error())
	case code != 200 && code != 201:
		c.errs = append(c.errs, fmt.Sprintf("%s: %d %s", e.Name, code, body))
	case c.present[e.Name]:
		c.present[e.Name] = false
		c.removed++
	default:
		c.present[e.Name] = true
		c.added++
	}
}
