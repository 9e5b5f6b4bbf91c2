package scenarios

import (
	"fmt"
	"sort"
	"strings"
	"time"

	"github.com/narwhal-router/narwhal/bench/harness"
	"github.com/narwhal-router/narwhal/bench/loadgen"
	"github.com/narwhal-router/narwhal/bench/report"
)

// faultRate is the share of routed requests that inject one engine fault.
const faultRate = 0.05

// faultKinds is the mix: every pre-commit fault of the fault table that a retry may cure, on both
// legs, plus a smaller share of faults after the first token, which no retry may cure (they
// must end in one terminal SSE error event).
var faultKinds = []loadgen.FaultKind{
	{Spec: "prefill.refuse", Role: "prefill", Weight: 1},
	{Spec: "prefill.status=500", Role: "prefill", Weight: 1},
	{Spec: "prefill.status=503", Role: "prefill", Weight: 1},
	{Spec: "prefill.hang_headers", Role: "prefill", Weight: 1},
	{Spec: "prefill.bad_descriptor=bad_blocks", Role: "prefill", Weight: 1},
	{Spec: "prefill.wrong_engine_id", Role: "prefill", Weight: 1},
	{Spec: "decode.refuse", Role: "decode", Weight: 1},
	{Spec: "decode.status=500", Role: "decode", Weight: 1},
	{Spec: "decode.hang_first_token", Role: "decode", Weight: 1},
	{Spec: "decode.close_after=0", Role: "decode", Weight: 1},
	{Spec: "decode.done_first", Role: "decode", Weight: 1},
	{Spec: "decode.error_in_stream=500", Role: "decode", Weight: 1},
	{Spec: "decode.close_after=3", Role: "decode", Weight: 0.6, AfterCommit: true},
	{Spec: "decode.silence_after=3", Role: "decode", Weight: 0.6, AfterCommit: true},
}

// Faults is the overhead scenario with engine faults injected into ~5% of routed requests and
// retries on (3 attempts, a generous budget, short timeouts). The direct arm runs fault-free
// in interleaved windows as the reference. It checks that every routed request ends in
// exactly one outcome — by the generator's reading of each response and by the router's own
// count — and measures goodput against the direct arm.
func Faults(env harness.Env) (*report.Section, error) {
	sec := report.NewSection("faults", fmt.Sprintf(
		"overhead shape, %.0f%% of routed requests inject an engine fault, retries on (3 attempts)", faultRate*100))
	rc := harness.DefaultRouterConfig()
	rc.MaxAttempts, rc.RetryRatio, rc.RetryMinPerS = 3, 0.5, 50
	rc.PrefillTimeoutS, rc.FirstTokenTimeoutS, rc.DecodeReadTimeoutS = 0.5, 0.5, 0.5
	rc.DeadlineS, rc.ProbeIntervalS, rc.ExposeRoutingHeaders = 10, 0.25, true
	rig, err := harness.StartRig(env, harness.RigOptions{
		Fleet:  harness.FleetOptions{Prefill: 2, Decode: 2, TTFT: 20 * time.Millisecond, ITL: 5 * time.Millisecond, Tokens: 64},
		Router: rc,
	})
	if err != nil {
		return nil, err
	}
	defer rig.Close()

	closed := func(name string, arm loadgen.Arm, d time.Duration, faults bool) loadgen.Phase {
		p := loadgen.Phase{Name: name, Arm: arm, Mode: loadgen.Closed, Concurrency: overheadConcurrency,
			Duration: env.Scale(d), MaxTokens: overheadTokens, PromptWords: promptWords, Guard: 30 * time.Second}
		if faults && arm == loadgen.Routed {
			p.Faults = &loadgen.FaultPlan{Rate: faultRate, Kinds: faultKinds}
		}
		return p
	}
	harness.Logf("faults: warming up both arms (no faults)")
	for _, arm := range []loadgen.Arm{loadgen.Routed, loadgen.Direct} {
		if _, err := rig.Run(closed("warmup", arm, 2*time.Second, false)); err != nil {
			return nil, err
		}
	}
	before, err := routerOutcomes(rig.Router)
	if err != nil {
		return nil, err
	}
	const pairs = 8
	harness.Logf("faults: %d interleaved window pairs, faults in the routed windows", pairs)
	dw, rw, err := interleave(rig, pairs, func(arm loadgen.Arm, i int) loadgen.Phase {
		return closed(fmt.Sprintf("window-%d", i), arm, 3*time.Second, true)
	})
	if err != nil {
		return nil, err
	}
	after, err := routerOutcomes(rig.Router)
	if err != nil {
		return nil, err
	}
	counted := after.total - before.total

	d, r := dw.Result, rw.Result
	directOK := float64(d.OK) / float64(max(d.Sent, 1))
	routedOK := float64(r.OK) / float64(max(r.Sent, 1))
	goodput := routedOK / max(directOK, 1e-9)
	oneOutcome := r.ViolationCount() == 0 && counted == r.Sent

	var injected, consumed, afterCommit int
	ft := r.Faults
	if ft != nil {
		for k, v := range ft.Injected {
			injected += v
			if ft.AfterCommit[k] {
				afterCommit += ft.Consumed[k]
			}
		}
		for _, v := range ft.Consumed {
			consumed += v
		}
	}

	t := report.NewTable("", "direct (no faults)", "routed (faults, retries)")
	t.Row("requests", report.Num(float64(d.Sent)), report.Num(float64(r.Sent)))
	t.Row("succeeded (complete stream, every token)", report.Num(float64(d.OK)), report.Num(float64(r.OK)))
	t.Row("success share", fmt.Sprintf("%.4f", directOK), fmt.Sprintf("%.4f", routedOK))
	t.Row("goodput (ok requests/s)", report.Num(d.Rate()), report.Num(r.Rate()))
	t.Row("error outcomes", report.Num(float64(d.ErrorCount())), report.Num(float64(r.ErrorCount())))
	t.Row("outcome violations", report.Num(float64(d.ViolationCount())), report.Num(float64(r.ViolationCount())))
	rfb, dfb := loadgen.Summarize(r.FirstByte), loadgen.Summarize(d.FirstByte)
	t.Row("first_byte p50 / p99 (ms)", ms(dfb.P50)+" / "+ms(dfb.P99), ms(rfb.P50)+" / "+ms(rfb.P99))
	sec.Add(t.String())
	sec.Printf("faults injected %d, applied by an engine %d (%.2f%% of routed requests), %d of them after the first token",
		injected, consumed, 100*float64(consumed)/float64(max(r.Sent, 1)), afterCommit)
	if ft != nil {
		sec.Add(faultTable(ft))
	}
	sec.Printf("routed error outcomes: %s", mix(r.Errors))
	if r.ViolationCount() > 0 {
		sec.Printf("VIOLATIONS (routed): %s", mix(r.Violations))
	}
	if d.ErrorCount()+d.ViolationCount() > 0 {
		sec.Printf("direct errors: %s %s", mix(d.Errors), mix(d.Violations))
	}
	sec.Printf("attempts per routed request (x-narwhal-attempts): %s", attemptsMix(r.Attempts))
	sec.Printf("router's own count of finished requests in these windows: %d for %d sent (%s)", counted, r.Sent,
		map[bool]string{true: "one outcome each", false: "MISMATCH"}[counted == r.Sent])
	if len(after.retries) > 0 {
		sec.Printf("router retries by cause: %s", mix(diffCounts(after.retries, before.retries)))
	}
	sec.Printf("goodput ratio = routed success share / direct success share; faults after the first token cannot be")
	sec.Printf("retried (nothing is retried after commit), so the ceiling is about 1 - %.4f here.", float64(afterCommit)/float64(max(r.Sent, 1)))

	sec.Figure("faults_goodput_ratio", goodput)
	sec.Figure("faults_one_outcome_each", oneOutcome)
	sec.Figure("faults_applied", consumed)
	sec.Figure("faults_after_commit", afterCommit)
	sec.Figure("routed_requests", r.Sent)
	sec.Figure("routed_ok", r.OK)
	sec.Figure("direct_success_share", directOK)
	sec.Figure("violations", r.ViolationCount())
	sec.Figure("router_counted", counted)
	sec.Target(report.Target{Name: "every request ends in exactly one outcome", Boolean: true, Value: b2f(oneOutcome)})
	sec.Target(report.Target{Name: "goodput vs the direct arm's fault-free requests", Value: goodput * 100, Unit: "%", Limit: 99, AtLeast: true})
	return sec, nil
}

func b2f(b bool) float64 {
	if b {
		return 1
	}
	return 0
}

func faultTable(ft *loadgen.FaultTally) string {
	t := report.NewTable("fault", "injected", "applied", "after first token")
	keys := make([]string, 0, len(ft.Injected))
	for k := range ft.Injected {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	for _, k := range keys {
		t.Row(k, report.Num(float64(ft.Injected[k])), report.Num(float64(ft.Consumed[k])),
			map[bool]string{true: "yes", false: ""}[ft.AfterCommit[k]])
	}
	if ft.Failed > 0 {
		t.Row("(injections that failed)", report.Num(float64(ft.Failed)), "", "")
	}
	return t.String()
}

func attemptsMix(m map[int]int) string {
	if len(m) == 0 {
		return "not reported"
	}
	keys := make([]int, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	sort.Ints(keys)
	var parts []string
	for _, k := range keys {
		parts = append(parts, fmt.Sprintf("%d: %d", k, m[k]))
	}
	return strings.Join(parts, ", ")
}

// outcomes is the router's own count of finished requests (narwhal_requests_total, every status
// and outcome) and of retries by reason, from its Prometheus endpoint.
type outcomes struct {
	total   int
	retries map[string]int
}

func routerOutcomes(r *harness.Router) (outcomes, error) {
	// Counters reach the Prometheus reporter on tally's flush (every second).
	time.Sleep(1500 * time.Millisecond)
	req, err := r.Counter("narwhal_requests_total", "")
	if err != nil {
		return outcomes{}, err
	}
	ret, err := r.Counter("narwhal_retries_total", "reason")
	if err != nil {
		return outcomes{}, err
	}
	o := outcomes{total: int(req[""]), retries: map[string]int{}}
	for k, v := range ret {
		o.retries[k] = int(v)
	}
	return o, nil
}

func diffCounts(a, b map[string]int) map[string]int {
	out := map[string]int{}
	for k, v := range a {
		if d := v - b[k]; d > 0 {
			out[k] = d
		}
	}
	return out
}
