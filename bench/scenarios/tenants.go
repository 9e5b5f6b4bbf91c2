package scenarios

import (
	"fmt"
	"sort"
	"strings"
	"time"

	"github.com/narwhal-router/narwhal/bench/harness"
	"github.com/narwhal-router/narwhal/bench/loadgen"
	"github.com/narwhal-router/narwhal/bench/report"
	"github.com/narwhal-router/narwhal/bench/sim"
	"github.com/narwhal-router/narwhal/config"
)

// The tenants scenario's shape (bench/README.md, "Tenants", explains each).
const (
	// tenantsSlots is the router's max_inflight per engine and the engines' max_num_seqs
	// the double of it, so that a full fleet queues in the router, not in the engines.
	tenantsSlots    = 8
	tenantsTokens   = 48
	tenantsPrompt   = 64
	tenantsOverload = 1.5 // offered load over the measured capacity
	// tenantsQuietShare and tenantsInteractiveShare are the quiet tenant's and the interactive
	// band's parts of the offered load.
	tenantsQuietShare       = 0.1
	tenantsInteractiveShare = 0.2
	tenantsSLO              = time.Second
	// The goals of issue 37.
	tenantsQuietRatioGoal = 1.3
	tenantsGoodputGoal    = 0.95
	tenantsSLOShareGoal   = 0.95
)

// The tenants' API keys (benchmark-only secrets) and the bands.
const (
	keyQuiet, keyNoisy, keyApp = "bench-quiet-key", "bench-noisy-key", "bench-app-key"
	bandInteractive, bandBatch = "interactive", "batch"
)

// tenantsFlowControl is the flow-control arm's section: two bands, and three tenants of equal
// weight in the batch band (quiet, noisy; app, which may also ask for interactive).
func tenantsFlowControl() *config.FlowControl {
	fc := config.Default().FlowControl
	fc.Bands = []config.FlowBand{{Name: bandInteractive}, {Name: bandBatch}}
	fc.Tenants = []config.Tenant{
		{Name: "quiet", APIKeys: []string{keyQuiet}, Band: bandBatch},
		{Name: "noisy", APIKeys: []string{keyNoisy}, Band: bandBatch},
		{Name: "app", APIKeys: []string{keyApp}, Band: bandBatch, Bands: []string{bandInteractive}},
	}
	return &fc
}

// tenantsArm is one router configuration: FIFO (no keys: every request is "anonymous", served
// in arrival order) or flow control.
type tenantsArm struct {
	name string
	fc   *config.FlowControl
}

// flows are the flows of one experiment on arm a, with the keys and band headers only under
// flow control (the FIFO router knows neither).
func (a tenantsArm) flows(fs ...loadgen.Flow) []loadgen.Flow {
	if a.fc != nil {
		return fs
	}
	out := make([]loadgen.Flow, len(fs))
	for i, f := range fs {
		out[i] = loadgen.Flow{Name: f.Name, Share: f.Share}
	}
	return out
}

// Tenants measures the admission queue's flow control (issue 37) on a fleet of calibrated
// simulated engines at 1.5× its capacity, against the same router without it (FIFO): a quiet
// tenant's time to first token beside a noisy one, and an interactive band's beside an
// overloaded batch band.
func Tenants(env harness.Env) (*report.Section, error) {
	sec := report.NewSection("tenants", fmt.Sprintf("flow control against FIFO at %.1f× the fleet's capacity (2 prefill + 2 decode, calibrated capacity model)", tenantsOverload))
	c := sim.Calibrated
	sec.Printf("engines: capacity model calibrated to %s on %s: step = %v + %v × sequences + %v × prefill tokens; max_num_seqs %d; "+
		"router max_inflight %d per engine, so a full fleet queues in the router; %d-word prompts, %d output tokens, P/D always",
		c.Model, c.GPU, c.ITL, c.ITLPerSeq, c.PrefillPerToken, 2*tenantsSlots, tenantsSlots, tenantsPrompt, tenantsTokens)
	window := env.Scale(30 * time.Second)
	phase := func(name string, rate float64, flows []loadgen.Flow) loadgen.Phase {
		return loadgen.Phase{Name: name, Arm: loadgen.Routed, Mode: loadgen.Open, Rate: rate, Duration: window,
			MaxTokens: tenantsTokens, PromptWords: tenantsPrompt, Guard: 5 * time.Minute, Flows: flows}
	}
	arms := []tenantsArm{{name: "FIFO"}, {name: "flow control", fc: tenantsFlowControl()}}
	var capacity float64
	results := map[string]loadgen.Result{} // by "<arm>/<experiment>"
	for _, a := range arms {
		err := withTenantsRig(env, a, func(rig *harness.Rig) error {
			if capacity == 0 {
				var err error
				if capacity, err = tenantsCapacity(env, rig, sec); err != nil {
					return err
				}
			}
			quiet := loadgen.Flow{Name: "quiet", Key: keyQuiet, Share: tenantsQuietShare}
			noisy := loadgen.Flow{Name: "noisy", Key: keyNoisy, Share: 1 - tenantsQuietShare}
			interactive := loadgen.Flow{Name: bandInteractive, Key: keyApp, Band: bandInteractive, Share: tenantsInteractiveShare}
			batch := loadgen.Flow{Name: bandBatch, Key: keyApp, Band: bandBatch, Share: 1 - tenantsInteractiveShare}
			offered := tenantsOverload * capacity
			runs := []loadgen.Phase{
				phase("noisy", offered, a.flows(quiet, noisy)),
				phase("bands", offered, a.flows(interactive, batch)),
			}
			if a.fc != nil {
				// The quiet tenant alone on the same fleet: its own load and nothing else.
				runs = append([]loadgen.Phase{phase("alone", tenantsQuietShare*offered, a.flows(loadgen.Flow{Name: "quiet", Key: keyQuiet, Share: 1}))}, runs...)
			}
			for _, p := range runs {
				harness.Logf("tenants: %s, %s at %.1f/s for %v", a.name, p.Name, p.Rate, window)
				w, err := rig.Run(p)
				if err != nil {
					return err
				}
				results[a.name+"/"+p.Name] = w.Result
			}
			return nil
		})
		if err != nil {
			return nil, err
		}
	}
	tenantsReport(sec, capacity, window, results)
	sec.Printf("machine: %s shared with other work, load average %s at the end: every latency includes its scheduling delays", cpus(), LoadAverage())
	return sec, nil
}

// withTenantsRig starts a fleet and a router configured for arm a, runs f, and stops them.
func withTenantsRig(env harness.Env, a tenantsArm, f func(*harness.Rig) error) error {
	rc := harness.DefaultRouterConfig()
	rc.MaxInflight = tenantsSlots
	// Requests wait as long as the overload lasts: nothing is refused for waiting.
	rc.DeadlineS, rc.QueueTimeoutS, rc.MaxQueue = 600, 600, 1_000_000
	rc.FirstTokenTimeoutS = 60
	rc.FlowControl = a.fc
	c := sim.Calibrated
	rig, err := harness.StartRig(env, harness.RigOptions{
		Fleet: harness.FleetOptions{Prefill: 2, Decode: 2, ITL: c.ITL, Tokens: tenantsTokens,
			Args: []string{"--max-num-seqs", fmt.Sprint(2 * tenantsSlots), "--max-model-len", "8192", "--transfer-per-block", "50us"}},
		Router: rc,
	})
	if err != nil {
		return fmt.Errorf("tenants %s: %w", a.name, err)
	}
	defer rig.Close()
	if _, err := rig.Run(loadgen.Phase{Name: "warmup", Arm: loadgen.Routed, Mode: loadgen.Closed, Concurrency: 4 * tenantsSlots,
		Duration: env.Scale(2 * time.Second), MaxTokens: tenantsTokens, PromptWords: tenantsPrompt, Guard: time.Minute}); err != nil {
		return err
	}
	return f(rig)
}

// tenantsCapacity measures the fleet's capacity: requests/s completed in closed loop with
// twice as many clients as the fleet's decode slots, so the router always has one waiting.
func tenantsCapacity(env harness.Env, rig *harness.Rig, sec *report.Section) (float64, error) {
	decodeSlots := 0
	for _, e := range rig.Fleet.Engines {
		if e.Role == "decode" {
			decodeSlots += tenantsSlots
		}
	}
	w, err := rig.Run(loadgen.Phase{Name: "capacity", Arm: loadgen.Routed, Mode: loadgen.Closed, Concurrency: 2 * decodeSlots,
		Duration: env.Scale(10 * time.Second), MaxTokens: tenantsTokens, PromptWords: tenantsPrompt, Guard: time.Minute})
	if err != nil {
		return 0, err
	}
	r := w.Result
	if r.OK == 0 || lost(r) > 0 {
		return 0, fmt.Errorf("tenants: capacity run failed: ok %d, errors %v, violations %v", r.OK, r.Errors, r.Violations)
	}
	sec.Printf("capacity: %.1f requests/s, measured in closed loop with %d clients for %v (twice the %d decode slots, so a request always waits in the router) on the FIFO router; "+
		"offered load %.1f× that, %.1f/s, open loop for %v per run, then the backlog drains (its time counts in goodput: successes ÷ the run's whole time)",
		r.Rate(), 2*decodeSlots, r.Elapsed.Round(time.Millisecond), decodeSlots, tenantsOverload, tenantsOverload*r.Rate(), env.Scale(30*time.Second))
	return r.Rate(), nil
}

// tenantsReport renders the results: the tables per tenant and band and arm, the ratios as
// figures and targets.
func tenantsReport(sec *report.Section, capacity float64, window time.Duration, res map[string]loadgen.Result) {
	sec.Figure("capacity_rps", capacity)
	row := func(t *report.Table, arm, flow string, r *loadgen.Result) {
		fb := loadgen.Summarize(r.FirstByte)
		t.Row(arm, flow, report.Num(float64(r.Sent)/window.Seconds()), report.Num(float64(r.Sent)), report.Num(float64(r.OK)),
			refusals(r), report.Num(r.Rate()), ms(fb.P50), ms(fb.P99), ms(fb.Max), report.Num(100*withinSLO(r)))
	}
	header := []string{"arm", "flow", "offered/s", "sent", "ok", "refused/failed", "goodput/s", "p50 first token (ms)", "p99 (ms)", "max (ms)", "≤ 1 s (%)"}

	sec.Printf("")
	sec.Printf("A. a quiet tenant (%.0f%% of the load) and a noisy one (%.0f%%), equal weights; first token from each request's scheduled start:",
		100*tenantsQuietShare, 100*(1-tenantsQuietShare))
	ta := report.NewTable(header...)
	alone := res["flow control/alone"]
	row(ta, "alone", "quiet", alone.Flows["quiet"])
	for _, arm := range []string{"FIFO", "flow control"} {
		r := res[arm+"/noisy"]
		for _, f := range []string{"quiet", "noisy"} {
			row(ta, arm, f, r.Flows[f])
		}
		row(ta, arm, "all", &r)
	}
	sec.Add(ta.String())

	sec.Printf("")
	sec.Printf("B. an interactive band (%.0f%% of the load) and a batch band (%.0f%%) of one tenant; SLO: first token within %v:",
		100*tenantsInteractiveShare, 100*(1-tenantsInteractiveShare), tenantsSLO)
	tb := report.NewTable(header...)
	for _, arm := range []string{"FIFO", "flow control"} {
		r := res[arm+"/bands"]
		for _, f := range []string{bandInteractive, bandBatch} {
			row(tb, arm, f, r.Flows[f])
		}
		row(tb, arm, "all", &r)
	}
	sec.Add(tb.String())

	p99 := func(key, flow string) float64 {
		r := res[key]
		return loadgen.Ms(loadgen.Summarize(r.Flows[flow].FirstByte).P99)
	}
	quietAlone, quietFIFO, quietFlow := p99("flow control/alone", "quiet"), p99("FIFO/noisy", "quiet"), p99("flow control/noisy", "quiet")
	fifo, flow := res["FIFO/noisy"], res["flow control/noisy"]
	sec.Figure("quiet_p99_alone_ms", quietAlone)
	sec.Figure("quiet_p99_fifo_ms", quietFIFO)
	sec.Figure("quiet_p99_flow_ms", quietFlow)
	sec.Figure("quiet_fifo_over_alone", quietFIFO/quietAlone)
	sec.Figure("quiet_flow_over_alone", quietFlow/quietAlone)
	sec.Figure("goodput_fifo_rps", fifo.Rate())
	sec.Figure("goodput_flow_rps", flow.Rate())
	sec.Figure("goodput_flow_over_fifo", flow.Rate()/fifo.Rate())
	sloFIFO := withinSLO(res["FIFO/bands"].Flows[bandInteractive])
	sloFlow := withinSLO(res["flow control/bands"].Flows[bandInteractive])
	sec.Figure("interactive_within_slo_fifo", sloFIFO)
	sec.Figure("interactive_within_slo_flow", sloFlow)
	sec.Printf("")
	sec.Printf("quiet p99 ÷ alone: FIFO %.2f, flow control %.2f (goal ≤ %.1f); goodput flow control ÷ FIFO %.3f (goal ≥ %.2f); "+
		"interactive within %v: FIFO %.1f%%, flow control %.1f%% (goal ≥ %.0f%%)",
		quietFIFO/quietAlone, quietFlow/quietAlone, tenantsQuietRatioGoal, flow.Rate()/fifo.Rate(), tenantsGoodputGoal,
		tenantsSLO, 100*sloFIFO, 100*sloFlow, 100*tenantsSLOShareGoal)
	if ec := errorClasses(res); ec != "" {
		sec.Printf("refused or failed, by class: %s", ec)
	} else {
		sec.Printf("nothing was refused or failed: every request waited for its slot")
	}
	sec.Target(report.Target{Name: "quiet tenant p99 under flow control ÷ alone", Value: quietFlow / quietAlone, Unit: "×", Limit: tenantsQuietRatioGoal})
	sec.Target(report.Target{Name: "goodput under flow control ÷ FIFO", Value: flow.Rate() / fifo.Rate(), Unit: "×", Limit: tenantsGoodputGoal, AtLeast: true})
	sec.Target(report.Target{Name: "interactive first token within 1 s under flow control", Value: 100 * sloFlow, Unit: "%", Limit: 100 * tenantsSLOShareGoal, AtLeast: true})
}

// withinSLO is the share of r's requests whose first token came within tenantsSLO; a request
// that failed counts as a miss.
func withinSLO(r *loadgen.Result) float64 {
	if r == nil || r.Sent == 0 {
		return 0
	}
	n := 0
	for _, us := range r.FirstByte {
		if time.Duration(us)*time.Microsecond <= tenantsSLO {
			n++
		}
	}
	return float64(n) / float64(r.Sent)
}

// refusals is r's errors and violations, with the dropped requests.
func refusals(r *loadgen.Result) string { return report.Num(float64(lost(*r))) }

// errorClasses lists every run's errors and violations, "<run> <flow>: class ×n", sorted.
func errorClasses(res map[string]loadgen.Result) string {
	var out []string
	for key, r := range res {
		for name, f := range r.Flows {
			for _, m := range []map[string]int{f.Errors, f.Violations} {
				for class, n := range m {
					out = append(out, fmt.Sprintf("%s %s: %s ×%d", key, name, class, n))
				}
			}
		}
	}
	sort.Strings(out)
	return strings.Join(out, "; ")
}
