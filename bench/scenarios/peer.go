package scenarios

import (
	"github.com/narwhal-router/narwhal/bench/harness"
	"github.com/narwhal-router/narwhal/bench/loadgen"
	"github.com/narwhal-router/narwhal/bench/report"
)

// interleaveArms runs rounds of one window per arm, rotating the order every round (with two
// arms that is ABBA; with three, ABC CAB BCA …) so that drift on the shared machine hits every
// arm alike, and merges each arm's windows.
func interleaveArms(rig *harness.Rig, rounds int, arms []loadgen.Arm, phase func(arm loadgen.Arm, i int) loadgen.Phase) (map[loadgen.Arm]harness.Window, error) {
	got := map[loadgen.Arm][]harness.Window{}
	for i := range rounds {
		for j := range arms {
			arm := arms[(j+i)%len(arms)]
			if len(arms) == 2 && i%2 == 1 {
				arm = arms[len(arms)-1-j]
			}
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

// peerPointOf is pointOf for the peer proxy's CPU in a peer window.
func peerPointOf(w harness.Window) cpuPoint {
	w.Router = w.Peer
	return pointOf(w)
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
