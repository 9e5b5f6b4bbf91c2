package scenarios

import (
	"fmt"
	"math"
	"time"

	"github.com/narwhal-router/narwhal/bench/harness"
	"github.com/narwhal-router/narwhal/bench/loadgen"
	"github.com/narwhal-router/narwhal/bench/report"
)

const (
	saturationTokens  = 16
	saturationP99     = 50 * time.Millisecond
	saturationStart   = 250.0
	saturationGrowth  = 1.5
	saturationMaxRate = 40000.0
	bisectSteps       = 3
)

// Saturation finds the highest open-loop request rate the router sustains with p99
// first_byte under 50 ms (from each request's scheduled start) and no failed or dropped
// request, against engines with no latency at all, so that only the router, the generator
// and the simulator's own work load the machine. The direct arm is ramped alongside as the
// machine's limit without a router.
func Saturation(env harness.Env) (*report.Section, error) {
	sec := report.NewSection("saturation", fmt.Sprintf(
		"zero-latency engines, %d tokens, open loop; highest rate with p99 first_byte < %s and nothing lost",
		saturationTokens, saturationP99))
	rig, err := harness.StartRig(env, harness.RigOptions{
		Fleet:  harness.FleetOptions{Prefill: 2, Decode: 2, Tokens: saturationTokens},
		Router: harness.DefaultRouterConfig(),
	})
	if err != nil {
		return nil, err
	}
	defer rig.Close()

	step := func(arm loadgen.Arm, rate float64, d time.Duration) loadgen.Phase {
		return loadgen.Phase{Name: fmt.Sprintf("%s-%.0f", arm, rate), Arm: arm, Mode: loadgen.Open, Rate: rate,
			Duration: env.Scale(d), MaxTokens: saturationTokens, PromptWords: promptWords, Guard: 10 * time.Second,
			MaxInFlight: 4000}
	}
	harness.Logf("saturation: warming up")
	for _, arm := range []loadgen.Arm{loadgen.Routed, loadgen.Direct} {
		if _, err := rig.Run(step(arm, saturationStart, 2*time.Second)); err != nil {
			return nil, err
		}
	}

	table := report.NewTable("offered/s", "arm", "ok/s", "p50 fb (ms)", "p99 fb (ms)", "lost", "router CPU", "router procs", "fleet CPU", "generator CPU", "verdict")
	var lastPass *harness.Window
	run := func(arm loadgen.Arm, rate float64) (bool, error) {
		w, err := rig.Run(step(arm, rate, 3*time.Second))
		if err != nil {
			return false, err
		}
		ok, why := sustained(w.Result)
		fb := loadgen.Summarize(w.Result.FirstByte)
		verdict := "sustained"
		if !ok {
			verdict = why
		}
		table.Row(report.Num(rate), string(arm), report.Num(w.Result.Rate()), ms(fb.P50), ms(fb.P99),
			report.Num(float64(lost(w.Result))), cpuShare(w.Router.CPU, w.Wall), procsOf(rig.Router), cpuShare(w.Fleet.CPU, w.Wall),
			cpuShare(w.Gen.CPU, w.Wall), verdict)
		harness.Logf("saturation: %s at %.0f/s: p99 first_byte %s, %s", arm, rate, fb.P99.Round(10*time.Microsecond), verdict)
		if ok && arm == loadgen.Routed {
			lastPass = &w
		}
		return ok, nil
	}
	// A routed step fails only if it fails twice: the machine is shared, and one noisy
	// neighbour should not decide the figure.
	routed := func(rate float64) (bool, error) {
		ok, err := run(loadgen.Routed, rate)
		if err != nil || ok {
			return ok, err
		}
		return run(loadgen.Routed, rate)
	}

	harness.Logf("saturation: ramping both arms ×%.1f from %.0f/s", saturationGrowth, saturationStart)
	lo, hi := 0.0, 0.0
	directLimit, directFailed := 0.0, false
	for rate := saturationStart; rate <= saturationMaxRate; rate = math.Round(rate * saturationGrowth) {
		if !directFailed {
			ok, err := run(loadgen.Direct, rate)
			if err != nil {
				return nil, err
			}
			if ok {
				directLimit = rate
			} else {
				directFailed = true
			}
		}
		ok, err := routed(rate)
		if err != nil {
			return nil, err
		}
		if !ok {
			hi = rate
			break
		}
		lo = rate
	}
	if hi > 0 && lo > 0 {
		harness.Logf("saturation: bisecting the routed arm between %.0f/s and %.0f/s", lo, hi)
		for range bisectSteps {
			mid := math.Round((lo + hi) / 2)
			ok, err := routed(mid)
			if err != nil {
				return nil, err
			}
			if ok {
				lo = mid
			} else {
				hi = mid
			}
		}
	}
	// The direct arm's own limit, for scale: keep ramping it past the routed arm's.
	if !directFailed && hi > 0 {
		harness.Logf("saturation: ramping the direct arm on from %.0f/s", directLimit)
		for rate, steps := math.Round(directLimit*saturationGrowth), 0; steps < 3 && rate <= saturationMaxRate; rate, steps = math.Round(rate*saturationGrowth), steps+1 {
			ok, err := run(loadgen.Direct, rate)
			if err != nil {
				return nil, err
			}
			if !ok {
				directFailed = true
				break
			}
			directLimit = rate
		}
	}
	sec.Add(table.String())
	sec.Printf("lost = failed + violating + dropped (more than %d in flight) requests. CPU is each process's share of one core;",
		4000)
	sec.Printf("the machine has %s. Latency counts from each request's scheduled start, so queueing in the generator counts too.",
		cpus())
	if lo == 0 {
		sec.Printf("the routed arm failed even at %.0f/s", saturationStart)
	} else {
		sec.Printf("routed: sustained %s requests/s (first failing rate %s/s); direct: sustained %s requests/s%s",
			report.Num(lo), report.Num(hi), report.Num(directLimit), map[bool]string{true: "", false: " (never failed)"}[directFailed])
	}
	if lastPass != nil {
		perReq := float64(lastPass.Router.CPU.Microseconds()) / float64(max(lastPass.Result.Sent, 1))
		sec.Printf("at the highest sustained routed rate the router used %s µs CPU per request (%s of a core)",
			report.Num(perReq), cpuShare(lastPass.Router.CPU, lastPass.Wall))
		sec.Figure("router_cpu_us_per_request_at_saturation", perReq)
	}
	sec.Figure("saturation_rps", lo)
	sec.Figure("direct_saturation_rps", directLimit)

	if env.Profile && lo > 0 {
		harness.Logf("saturation: profiling the router at %.0f/s", lo)
		file := env.Path("cpu-saturation.pprof")
		secs := int(math.Max(1, env.Scale(6*time.Second).Seconds()))
		done := rig.Router.StartCPUProfile(secs, file)
		if _, err := rig.Run(step(loadgen.Routed, lo, 8*time.Second)); err != nil {
			return nil, err
		}
		if err := <-done; err != nil {
			sec.Printf("profile: %v", err)
		} else {
			sec.Printf("")
			sec.Printf("Router CPU profile at %s requests/s (%s), top by cumulative:", report.Num(lo), file)
			sec.Add(profileTop(env, file, 25, "-cum"))
		}
	}
	return sec, nil
}

// sustained says whether a window met the saturation criteria, and if not, why.
func sustained(r loadgen.Result) (bool, string) {
	if n := lost(r); n > 0 {
		return false, fmt.Sprintf("lost %d", n)
	}
	if p99 := loadgen.Summarize(r.FirstByte).P99; p99 >= saturationP99 {
		return false, "p99 over " + saturationP99.String()
	}
	return true, ""
}

func lost(r loadgen.Result) int { return r.ErrorCount() + r.ViolationCount() + r.Dropped }
