package scenarios

import (
	"github.com/narwhal-router/narwhal/bench/harness"
	"github.com/narwhal-router/narwhal/bench/loadgen"
	"github.com/narwhal-router/narwhal/bench/report"
)

// interleaveArms runs rounds of one window per arm in armOrder, so that drift on the shared
// machine hits every arm alike, and merges each arm's windows.
func interleaveArms(rig *harness.Rig, rounds int, arms []loadgen.Arm, phase func(arm loadgen.Arm, i int) loadgen.Phase) (map[loadgen.Arm]harness.Window, error) {
	got := map[loadgen.Arm][]harness.Window{}
	for i := range rounds {
		for _, arm := range armOrder(arms, i) {
			w, err := rig.Run(phase(arm, i))
			if err != nil {
				return nil, err
			}
			got[arm] = append(got[arm], w)
		}
	}
	out := make(map[loadgen.Arm]harness.Window, len(arms))
	for arm, ws := range got {
		out[arm] = harness.Merge(ws...)
	}
	return out, nil
}

// armOrder is the order of round i's windows: the arms rotated by i (A B C, B C A, C A B, …;
// with two arms that is ABBA), so that over as many rounds as there are arms every arm runs
// once in every position and none always goes first or last.
func armOrder[T any](arms []T, round int) []T {
	out := make([]T, len(arms))
	for j := range arms {
		out[j] = arms[(j+round)%len(arms)]
	}
	return out
}

// mallocs reads the router's count of heap allocations so far (go_memstats_mallocs_total).
func mallocs(r *harness.Router) (float64, bool) {
	v, err := r.Counter("go_memstats_mallocs_total", "")
	if err != nil {
		return 0, false
	}
	n, ok := v[""]
	return n, ok
}

// procsOf reads how many CPUs the router's scheduler runs on right now (narwhal_runtime_procs:
// server.procs, auto unless the generated configuration or -router-env GOMAXPROCS says
// otherwise), or "?".
func procsOf(r *harness.Router) string {
	v, err := r.Counter("narwhal_runtime_procs", "")
	if n, ok := v[""]; err == nil && ok {
		return report.Num(n)
	}
	return "?"
}

// over is a/b, or 0 when b is not positive.
func over(a, b float64) float64 {
	if b <= 0 {
		return 0
	}
	return a / b
}
