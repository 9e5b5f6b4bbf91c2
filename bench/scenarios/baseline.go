package scenarios

import (
	"time"

	"github.com/narwhal-router/narwhal/bench/loadgen"
)

// build is what the overhead scenario measured of one Narwhal build: the router under test,
// or the baseline (-baseline, an older build) run beside it in the same windows.
type build struct {
	cpuReq, cpuTok     float64 // the CPU fit: µs per request, per relayed token
	allocReq, allocTok float64 // the heap-allocation fit, same windows
	// cpuPer32Tok is its CPU per request in the interleaved closed-loop windows, and
	// addedP50/addedP99 its first_byte there over the direct arm's.
	cpuPer32Tok        float64
	addedP50, addedP99 time.Duration
}

// baselineKeys are the A/B figures, overhead.<key> in the JSON line.
var baselineKeys = []string{
	"baseline_cpu_us_per_request", "baseline_cpu_us_per_token",
	"baseline_allocs_per_request", "baseline_allocs_per_token",
	"baseline_cpu_us_per_32tok_request",
	"baseline_added_first_byte_p50_ms", "baseline_added_first_byte_p99_ms",
	"router_over_baseline_per_request", "router_over_baseline_per_token",
	"router_over_baseline_allocs_per_request",
}

// baselineFigures are the baseline build's figures and the router's over it. Without a
// baseline every key is there and null, so a reader of the JSON line tells "no A/B arm in
// this run" from a figure of 0. A ratio is null too when the baseline's figure is not
// positive (a fit that failed): 0 would read as the router costing nothing.
func baselineFigures(router build, baseline *build) map[string]any {
	out := make(map[string]any, len(baselineKeys))
	for _, k := range baselineKeys {
		out[k] = nil
	}
	if baseline == nil {
		return out
	}
	b := *baseline
	out["baseline_cpu_us_per_request"] = b.cpuReq
	out["baseline_cpu_us_per_token"] = b.cpuTok
	out["baseline_allocs_per_request"] = b.allocReq
	out["baseline_allocs_per_token"] = b.allocTok
	out["baseline_cpu_us_per_32tok_request"] = b.cpuPer32Tok
	out["baseline_added_first_byte_p50_ms"] = loadgen.Ms(b.addedP50)
	out["baseline_added_first_byte_p99_ms"] = loadgen.Ms(b.addedP99)
	setRatio := func(key string, r, b float64) {
		if b > 0 {
			out[key] = r / b
		}
	}
	setRatio("router_over_baseline_per_request", router.cpuReq, b.cpuReq)
	setRatio("router_over_baseline_per_token", router.cpuTok, b.cpuTok)
	setRatio("router_over_baseline_allocs_per_request", router.allocReq, b.allocReq)
	return out
}
