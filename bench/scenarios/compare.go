package scenarios

import (
	"fmt"
	"strings"
	"time"

	"github.com/narwhal-router/narwhal/bench/harness"
	"github.com/narwhal-router/narwhal/bench/loadgen"
	"github.com/narwhal-router/narwhal/bench/report"
)

// interleave runs pairs of windows, one per arm, in ABBA order (direct, routed, routed,
// direct, …) so that drift on the shared machine hits both arms alike, and merges each arm.
func interleave(rig *harness.Rig, pairs int, phase func(arm loadgen.Arm, i int) loadgen.Phase) (direct, routed harness.Window, err error) {
	ws, err := interleaveArms(rig, pairs, []loadgen.Arm{loadgen.Direct, loadgen.Routed}, phase)
	if err != nil {
		return direct, routed, err
	}
	return ws[loadgen.Direct], ws[loadgen.Routed], nil
}

// arms summarizes both arms' latencies.
type arms struct {
	d, r                 *loadgen.Result
	dTTFT, dFB, dTotal   loadgen.Summary
	rTTFT, rFB, rTotal   loadgen.Summary
	addedP50, addedP99   time.Duration // first_byte, routed minus direct
	directRPS, routedRPS float64
}

func compare(direct, routed *loadgen.Result) arms {
	a := arms{d: direct, r: routed,
		dTTFT: loadgen.Summarize(direct.TTFT), dFB: loadgen.Summarize(direct.FirstByte), dTotal: loadgen.Summarize(direct.Total),
		rTTFT: loadgen.Summarize(routed.TTFT), rFB: loadgen.Summarize(routed.FirstByte), rTotal: loadgen.Summarize(routed.Total),
		directRPS: direct.Rate(), routedRPS: routed.Rate()}
	a.addedP50 = a.rFB.P50 - a.dFB.P50
	a.addedP99 = a.rFB.P99 - a.dFB.P99
	return a
}

// table renders both arms side by side with their difference and ratio.
func (a arms) table() string {
	t := report.NewTable("", "direct", "routed", "routed − direct", "routed / direct")
	count := func(name string, d, r int) {
		t.Row(name, report.Num(float64(d)), report.Num(float64(r)), report.Signed(float64(r-d)), "")
	}
	count("requests ok", a.d.OK, a.r.OK)
	t.Row("requests/s", report.Num(a.directRPS), report.Num(a.routedRPS), report.Signed(a.routedRPS-a.directRPS), ratio(a.routedRPS, a.directRPS))
	count("errors", a.d.ErrorCount(), a.r.ErrorCount())
	count("outcome violations", a.d.ViolationCount(), a.r.ViolationCount())
	lat := func(name string, d, r time.Duration) {
		t.Row(name, ms(d), ms(r), report.Signed(loadgen.Ms(r-d)), ratio(float64(r), float64(d)))
	}
	lat("ttft_s p50 (ms)", a.dTTFT.P50, a.rTTFT.P50)
	lat("ttft_s p99 (ms)", a.dTTFT.P99, a.rTTFT.P99)
	lat("first_byte_s p50 (ms)", a.dFB.P50, a.rFB.P50)
	lat("first_byte_s p90 (ms)", a.dFB.P90, a.rFB.P90)
	lat("first_byte_s p99 (ms)", a.dFB.P99, a.rFB.P99)
	lat("first_byte_s max (ms)", a.dFB.Max, a.rFB.Max)
	lat("total_s p50 (ms)", a.dTotal.P50, a.rTotal.P50)
	lat("total_s p99 (ms)", a.dTotal.P99, a.rTotal.P99)
	return t.String()
}

// sideArm reports an arm the interleaved windows ran beside routed through its own proxy (the
// peer, the baseline), from w, its merged windows, and a, it against direct: its rate, its
// first_byte, its proxy's CPU per request and RSS, and what failed.
func sideArm(sec *report.Section, about string, a arms, w harness.Window) {
	arm, u := w.Result.Arm, w.ProxyUsage(w.Result.Arm)
	sec.Printf("%s arm (%s): %s/s, first_byte p50 %s ms p99 %s ms", arm, about, report.Num(a.routedRPS), ms(a.rFB.P50), ms(a.rFB.P99))
	sec.Printf("(direct %s / %s), %s µs of its CPU per request (%d-token answers), RSS %s MiB; errors %s",
		ms(a.dFB.P50), ms(a.dFB.P99), report.Num(pointOf(w, u).usPerRequest), overheadTokens, report.Num(float64(u.RSSKiB)/1024), mix(w.Result.Errors))
	if v := w.Result.ViolationCount(); v > 0 {
		sec.Printf("%s violations: %s", arm, mix(w.Result.Violations))
	}
}

// armList names arms for people: "direct, routed, peer".
func armList(arms []loadgen.Arm) string {
	names := make([]string, len(arms))
	for i, a := range arms {
		names[i] = string(a)
	}
	return strings.Join(names, ", ")
}

func ms(d time.Duration) string { return report.Num(loadgen.Ms(d)) }

func ratio(a, b float64) string {
	if b == 0 {
		return "n/a"
	}
	return fmt.Sprintf("%.3f", a/b)
}

// mix renders an error or violation mix, largest first.
func mix(m map[string]int) string {
	if len(m) == 0 {
		return "none"
	}
	var parts []string
	for _, k := range loadgen.SortedKeys(m) {
		parts = append(parts, fmt.Sprintf("%s ×%d", k, m[k]))
	}
	return strings.Join(parts, ", ")
}

// cpuShare is a process's CPU over a window as a share of one core.
func cpuShare(cpu, wall time.Duration) string {
	if wall <= 0 {
		return "n/a"
	}
	return fmt.Sprintf("%.0f%%", 100*cpu.Seconds()/wall.Seconds())
}

// profileTop renders `go tool pprof -top` of a saved profile, indented, or says why it cannot.
func profileTop(env harness.Env, file string, lines int, flags ...string) string {
	out, err := harness.PprofTop(env.Narwhal, file, lines, flags...)
	if err != nil {
		return "    (no excerpt: " + err.Error() + ")"
	}
	return "    " + strings.ReplaceAll(out, "\n", "\n    ")
}
