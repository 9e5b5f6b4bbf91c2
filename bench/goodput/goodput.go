// Package goodput owns the arithmetic of capacity under latency SLOs, DistServe's goodput:
// per-request time to first token (TTFT) and time per output token after the first
// (TPOT), nearest-rank percentiles, the share of requests that meet both a TTFT and a TPOT
// SLO (attainment), the highest offered rate whose attainment reaches a target (goodput,
// interpolated between swept rates), and the arrival times of a trace scaled to an offered
// rate. It measures nothing itself: the goodput scenario (bench/scenarios) runs the sweep.
package goodput

import (
	"fmt"
	"math"
	"slices"
	"time"
)

// Sample is one offered request's outcome.
type Sample struct {
	// OK is false for a request that failed or was cut off; it meets no SLO.
	OK bool
	// CutOff marks a request abandoned after waiting as long as the run allows; its TTFT
	// is then a lower bound (the time to its first token, or the wait if none came) and
	// still counts in the TTFT percentiles, so an overloaded rate's tail is not hidden.
	CutOff bool
	// TTFT is from the request's scheduled send to its first generated token; E2E to its
	// last byte.
	TTFT, E2E time.Duration
	// Tokens is the number of output tokens.
	Tokens int
}

// TPOT is the mean time per output token after the first, (E2E − TTFT) / (Tokens − 1);
// false when the request has fewer than two tokens (no gap to time) or failed.
func (s Sample) TPOT() (time.Duration, bool) {
	if !s.OK || s.Tokens < 2 {
		return 0, false
	}
	return (s.E2E - s.TTFT) / time.Duration(s.Tokens-1), true
}

// SLO is a pair of latency objectives a request must both meet.
type SLO struct{ TTFT, TPOT time.Duration }

func (o SLO) String() string {
	return fmt.Sprintf("TTFT ≤ %v and TPOT ≤ %v", o.TTFT, o.TPOT)
}

// Met says whether s meets both objectives. A request with one token has no TPOT and is
// judged by its TTFT alone; a failed one meets nothing.
func (o SLO) Met(s Sample) bool {
	if !s.OK || s.TTFT > o.TTFT {
		return false
	}
	tpot, ok := s.TPOT()
	return !ok || tpot <= o.TPOT
}

// Attainment is the share of samples that meet o; every sample counts, failed ones as
// misses. 0 for no samples.
func (o SLO) Attainment(samples []Sample) float64 {
	if len(samples) == 0 {
		return 0
	}
	met := 0
	for _, s := range samples {
		if o.Met(s) {
			met++
		}
	}
	return float64(met) / float64(len(samples))
}

// Percentile is the nearest-rank q-quantile (0 < q ≤ 1) of sorted: the smallest value
// with at least q of the samples at or below it. 0 for no samples.
func Percentile(sorted []time.Duration, q float64) time.Duration {
	if len(sorted) == 0 {
		return 0
	}
	rank := int(math.Ceil(q * float64(len(sorted))))
	return sorted[min(max(rank, 1), len(sorted))-1]
}

// Latencies are the sorted TTFTs of the requests that succeeded or were cut off, and the
// sorted TPOTs of those that succeeded with two tokens or more.
func Latencies(samples []Sample) (ttft, tpot []time.Duration) {
	for _, s := range samples {
		if !s.OK && !s.CutOff {
			continue
		}
		ttft = append(ttft, s.TTFT)
		if v, ok := s.TPOT(); ok {
			tpot = append(tpot, v)
		}
	}
	slices.Sort(ttft)
	slices.Sort(tpot)
	return ttft, tpot
}

// Point is one swept rate's attainment.
type Point struct {
	Rate       float64 // offered requests/s
	Attainment float64 // share of requests meeting both SLOs, 0–1
}

// How a goodput was found.
const (
	// Interpolated: attainment crossed the target between two swept rates; the goodput is
	// where the straight line between them meets it.
	Interpolated = "interpolated"
	// AtLeast: every swept rate met the target; the goodput is at least the highest one.
	AtLeast = "at least the highest swept rate"
	// Below: the lowest swept rate already missed it; the goodput is below the sweep (0).
	Below = "below the lowest swept rate"
)

// Goodput is the highest offered rate at which attainment reaches target, from a sweep.
// Going up from the lowest rate, the first rate that misses the target is the knee; the
// goodput is interpolated linearly between it and the rate before (so a noisy point
// above the knee cannot raise it). how is Interpolated, AtLeast or Below.
func Goodput(points []Point, target float64) (rps float64, how string) {
	lo, hi, ok := Knee(points, target)
	switch {
	case ok:
		// lo meets the target, hi does not: lo.Attainment ≥ target > hi.Attainment.
		f := (lo.Attainment - target) / (lo.Attainment - hi.Attainment)
		return lo.Rate + f*(hi.Rate-lo.Rate), Interpolated
	case len(points) == 0 || lo.Rate == 0 && lo.Attainment == 0:
		return 0, Below
	}
	return lo.Rate, AtLeast
}

// Knee returns the swept points either side of the knee: hi is the first rate, going up,
// whose attainment misses target, lo the rate before it (ok true). When no rate misses,
// lo is the highest rate and ok false; when the lowest already misses, or there are no
// points, both are zero and ok false. A sweep refines the goodput by running the rate
// half way between lo and hi.
func Knee(points []Point, target float64) (lo, hi Point, ok bool) {
	ps := slices.Clone(points)
	slices.SortFunc(ps, func(a, b Point) int {
		switch {
		case a.Rate < b.Rate:
			return -1
		case a.Rate > b.Rate:
			return 1
		}
		return 0
	})
	if len(ps) == 0 || ps[0].Attainment < target {
		return Point{}, Point{}, false
	}
	for i := 1; i < len(ps); i++ {
		if ps[i].Attainment < target {
			return ps[i-1], ps[i], true
		}
	}
	return ps[len(ps)-1], Point{}, false
}

// ScaleArrivals returns at (a trace's arrival times, in order) stretched or compressed by
// one factor so that the mean offered rate, (n − 1) / span, is rate requests/s: the
// trace's bursts and lulls keep their shape. It needs at least two arrivals over a
// positive span.
func ScaleArrivals(at []time.Duration, rate float64) ([]time.Duration, error) {
	if len(at) < 2 || rate <= 0 || math.IsNaN(rate) || math.IsInf(rate, 0) {
		return nil, fmt.Errorf("scale arrivals: %d arrivals to %v requests/s: want two or more and a positive rate", len(at), rate)
	}
	span := at[len(at)-1] - at[0]
	if span <= 0 {
		return nil, fmt.Errorf("scale arrivals: the %d arrivals span %v: want a positive span", len(at), span)
	}
	natural := float64(len(at)-1) / span.Seconds()
	f := natural / rate
	out := make([]time.Duration, len(at))
	for i, t := range at {
		out[i] = time.Duration(float64(t-at[0]) * f)
	}
	return out, nil
}

// Rates are n offered rates from lo to hi, evenly spaced (n ≥ 2), or {lo} for n = 1.
func Rates(lo, hi float64, n int) []float64 {
	if n <= 1 {
		return []float64{lo}
	}
	out := make([]float64, n)
	for i := range n {
		out[i] = lo + (hi-lo)*float64(i)/float64(n-1)
	}
	return out
}
