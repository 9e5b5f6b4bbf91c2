package procs

import (
	"math"
	"runtime"
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

// feed gives the sizer n samples 50 ms apart from *at and returns the Ps after each.
func feed(s *sizer, at *time.Time, n int, sample func(i int) (float64, time.Duration)) []int {
	out := make([]int, n)
	for i := range n {
		*at = at.Add(50 * time.Millisecond)
		busy, wait := sample(i)
		out[i], _ = s.step(*at, busy, wait)
	}
	return out
}

func steady(busy float64, wait time.Duration) func(int) (float64, time.Duration) {
	return func(int) (float64, time.Duration) { return busy, wait }
}

// The decision, sample by sample: double at once on a busy interval or a slow run queue,
// never past Max; halve only after DownAfter of a smoothed lull, never below one.
func TestSizerGrowsAtOnceAndShrinksAfterALull(t *testing.T) {
	s := newSizer(Options{Max: 8, Interval: 50 * time.Millisecond, UpBusy: 0.25, UpWait: 250 * time.Microsecond, DownAfter: time.Second})
	at := time.Unix(1000, 0)
	last := func(ps []int) int { return ps[len(ps)-1] }

	if got := last(feed(&s, &at, 40, steady(0.2, -1))); got != 1 {
		t.Fatalf("0.2 cores on one P: %d Ps, want 1", got)
	}
	ps := feed(&s, &at, 20, steady(0.3, -1))
	if ps[0] != 1 || last(ps) != 2 {
		t.Fatalf("a second at 0.3 cores on one P: %v, want growth to 2 once the smoothed load passes 0.25", ps)
	}
	if got := feed(&s, &at, 1, steady(0.2, 400*time.Microsecond)); got[0] != 4 {
		t.Fatalf("a 400 µs run-queue p99 on 2 Ps: %d Ps, want 4 at once", got[0])
	}
	if got := feed(&s, &at, 2, steady(3.8, -1)); got[0] != 8 || got[1] != 8 {
		t.Fatalf("every one of 4 Ps busy: %v, want 8 at once and no more", got)
	}
	// 0.6 cores is above half of what grows 4 Ps (1/2 × 0.25 × 4 = 0.5): no lull.
	if got := last(feed(&s, &at, 200, steady(0.6, -1))); got != 8 {
		t.Fatalf("10 s at 0.6 cores: %d Ps, want 8", got)
	}
	// Quiet but for a 20 ms burst of one core every second (a metrics flush): the smoothed load
	// is a lull, so the Ps halve once per DownAfter (1 s) plus the smoothing's lag.
	flush := func(i int) (float64, time.Duration) {
		if i%20 == 0 {
			return 0.4, -1
		}
		return 0.01, -1
	}
	ps = feed(&s, &at, 200, flush)
	if last(ps) != 1 {
		t.Fatalf("10 s quiet with a burst each second: %d Ps, want 1 (%v)", last(ps), ps)
	}
	for i := 1; i < len(ps); i++ {
		if ps[i] > ps[i-1] || (ps[i] < ps[i-1] && ps[i] != ps[i-1]/2) {
			t.Fatalf("sample %d: %d → %d Ps, want only halving while quiet", i, ps[i-1], ps[i])
		}
		if ps[i] < ps[i-1] && i < 20 {
			t.Fatalf("halved after %d samples, before DownAfter", i)
		}
	}
	// Queueing goroutines end a lull even when the CPU is quiet.
	feed(&s, &at, 1, steady(0.95, -1)) // the one P saturated: back to 2 at once
	ps = feed(&s, &at, 100, steady(0.01, 200*time.Microsecond))
	if last(ps) != 2 {
		t.Fatalf("5 s quiet CPU with a 200 µs run-queue p99: %d Ps, want 2", last(ps))
	}
	if got := last(feed(&s, &at, 100, steady(0, -1))); got != 1 {
		t.Fatalf("5 s idle: %d Ps, want 1", got)
	}
}

// The controller itself, on this process: one P while idle, every CPU under load, one again
// after the load stops, and GOMAXPROCS restored by Stop.
func TestControllerFollowsTheLoad(t *testing.T) {
	max := runtime.GOMAXPROCS(0)
	if max < 2 {
		t.Skip("needs at least 2 CPUs")
	}
	changes := make(chan int, 256) // every change, in order (a handful in this test)
	c := Start(Options{Interval: 10 * time.Millisecond, DownAfter: 200 * time.Millisecond, OnChange: func(n int) { changes <- n }})
	defer c.Stop()
	var seen []int
	waitProcs := func(want int, when string) {
		t.Helper()
		deadline := time.After(10 * time.Second)
		for {
			select {
			case n := <-changes:
				seen = append(seen, n)
				if n != want {
					continue
				}
				if got := runtime.GOMAXPROCS(0); got != want {
					t.Fatalf("%s: OnChange said %d, GOMAXPROCS is %d", when, n, got)
				}
				return
			case <-deadline:
				t.Fatalf("%s: no change to %d within 10 s (changes so far %v)", when, want, seen)
			}
		}
	}
	waitProcs(1, "at start")

	var stop atomic.Bool
	var wg sync.WaitGroup
	for range max {
		wg.Add(1)
		go func() { // spin until told to stop
			defer wg.Done()
			for !stop.Load() {
				runtime.Gosched()
			}
		}()
	}
	waitProcs(max, "under load")
	stop.Store(true)
	wg.Wait()
	waitProcs(1, "after the load")

	c.Stop()
	if got := runtime.GOMAXPROCS(0); got != max {
		t.Fatalf("GOMAXPROCS %d after Stop, want %d", got, max)
	}
}

// The run-queue p99 is the upper bound of the bucket holding the 99th percentile, and nothing
// under minWaitSamples observations.
func TestP99OfTheRunQueueHistogram(t *testing.T) {
	buckets := []float64{0, 1e-6, 1e-5, 1e-4, math.Inf(1)}
	for _, c := range []struct {
		counts []uint64
		want   time.Duration
	}{
		{[]uint64{0, 99, 0, 1}, 10 * time.Microsecond},  // 1% above: the p99 is still in the second bucket
		{[]uint64{0, 98, 0, 2}, 100 * time.Microsecond}, // 2% in the open last bucket: its lower bound
		{[]uint64{10, 90, 0, 0}, 10 * time.Microsecond}, // every wait under 10 µs
		{[]uint64{0, 63, 0, 0}, -1},                     // too few to tell
	} {
		if got := p99Of(c.counts, buckets); got != c.want {
			t.Errorf("p99Of(%v) = %v, want %v", c.counts, got, c.want)
		}
	}
}

// Read from the runtime, a burst of goroutine starts is enough to report a p99.
func TestWaitReaderReadsTheRuntime(t *testing.T) {
	w := newWaitReader()
	var wg sync.WaitGroup
	deadline := time.Now().Add(10 * time.Second)
	for {
		for range 2000 {
			wg.Add(1)
			go func() { wg.Done() }()
		}
		wg.Wait()
		if got := w.p99(); got >= 0 {
			return
		}
		if time.Now().After(deadline) {
			t.Fatal("no run-queue p99 after 10 s of goroutine bursts")
		}
	}
}
