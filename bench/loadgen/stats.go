package loadgen

import (
	"math"
	"slices"
	"time"
)

// Summary describes a set of latency samples.
type Summary struct {
	N                   int
	P50, P90, P99, P999 time.Duration
	Max, Mean           time.Duration
}

// Summarize sorts a copy of samples (microseconds) and reads nearest-rank percentiles.
func Summarize(samples []int64) Summary {
	if len(samples) == 0 {
		return Summary{}
	}
	s := slices.Clone(samples)
	slices.Sort(s)
	var sum float64
	for _, v := range s {
		sum += float64(v)
	}
	us := func(v int64) time.Duration { return time.Duration(v) * time.Microsecond }
	return Summary{
		N:    len(s),
		P50:  us(Percentile(s, 0.50)),
		P90:  us(Percentile(s, 0.90)),
		P99:  us(Percentile(s, 0.99)),
		P999: us(Percentile(s, 0.999)),
		Max:  us(s[len(s)-1]),
		Mean: time.Duration(sum / float64(len(s)) * float64(time.Microsecond)),
	}
}

// Percentile is the nearest-rank q-quantile (0 < q ≤ 1) of sorted: the smallest sample with
// at least q of all samples at or below it.
func Percentile(sorted []int64, q float64) int64 {
	if len(sorted) == 0 {
		return 0
	}
	rank := int(math.Ceil(q*float64(len(sorted)))) - 1
	return sorted[min(max(rank, 0), len(sorted)-1)]
}

// Ms converts a duration to fractional milliseconds.
func Ms(d time.Duration) float64 { return float64(d) / float64(time.Millisecond) }
