package procs

import (
	"math"
	"runtime"
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

// The decision, sample by sample: double on a busy interval or a slow run queue, halve only
// after DownAfter of quiet, never past Max or below 1.
func TestSizerGrowsAtOnceAndShrinksAfterALull(t *testing.T) {
	s := sizer{max: 8, procs: 1, upBusy: 0.25, upWait: 250 * time.Microsecond, downAfter: time.Second}
	t0 := time.Unix(1000, 0)
	at := func(ms int) time.Time { return t0.Add(time.Duration(ms) * time.Millisecond) }
	steps := []struct {
		ms        int
		busy      float64
		wait      time.Duration
		wantProcs int
		changed   bool
	}{
		{0, 0.10, -1, 1, false},                        // light: one P
		{50, 0.30, -1, 2, true},                        // busier than 0.25 per P: double
		{100, 0.45, -1, 2, false},                      // 0.45 < 0.5: stays
		{150, 0.20, 400 * time.Microsecond, 4, true},   // the run queue is slow: double
		{200, 2.50, -1, 8, true},                       // 2.5 > 1.0: double
		{250, 9.00, -1, 8, false},                      // at Max
		{300, 0.30, -1, 8, false},                      // low for the size of 4 (< 1/3 × 0.25 × 4 = 0.33): a lull starts
		{1250, 0.30, -1, 8, false},                     // not yet DownAfter
		{1300, 0.30, -1, 4, true},                      // a second of lull: halve
		{1350, 0.20, -1, 4, false},                     // 0.20 ≥ 1/3 × 0.25 × 2: not low for 2
		{1400, 0.05, 100 * time.Microsecond, 4, false}, // a slow-ish queue (≥ upWait/4) is not a lull
		{1450, 0.05, -1, 4, false},                     // lull starts
		{2000, 0.30, -1, 4, false},                     // busy again: the lull is over
		{2050, 0.05, -1, 4, false},                     // a new lull
		{3050, 0.05, -1, 2, true},
		{3100, 0.01, -1, 2, false},
		{4100, 0.01, -1, 1, true},
		{9000, 0.00, -1, 1, false}, // never below one
	}
	for _, st := range steps {
		got, changed := s.step(at(st.ms), st.busy, st.wait)
		if got != st.wantProcs || changed != st.changed {
			t.Fatalf("at %d ms (busy %.2f, wait %v): procs %d changed %v, want %d %v", st.ms, st.busy, st.wait, got, changed, st.wantProcs, st.changed)
		}
	}
}

// The controller itself, on this process: one P while idle, every CPU under load, one again
// after the load stops, and GOMAXPROCS restored by Stop.
func TestControllerFollowsTheLoad(t *testing.T) {
	max := runtime.GOMAXPROCS(0)
	if max < 2 {
		t.Skip("needs at least 2 CPUs")
	}
	var seen []int
	var mu sync.Mutex
	c := Start(Options{Interval: 10 * time.Millisecond, DownAfter: 200 * time.Millisecond, OnChange: func(n int) {
		mu.Lock()
		seen = append(seen, n)
		mu.Unlock()
	}})
	defer c.Stop()
	waitProcs(t, 1, "at start")

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
	waitProcs(t, max, "under load")
	stop.Store(true)
	wg.Wait()
	waitProcs(t, 1, "after the load")

	c.Stop()
	if got := runtime.GOMAXPROCS(0); got != max {
		t.Fatalf("GOMAXPROCS %d after Stop, want %d", got, max)
	}
	mu.Lock()
	defer mu.Unlock()
	if len(seen) < 3 || seen[0] != 1 || seen[len(seen)-1] != 1 {
		t.Fatalf("OnChange saw %v, want 1 first, growth, 1 last", seen)
	}
}

func waitProcs(t *testing.T, want int, when string) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for runtime.GOMAXPROCS(0) != want {
		if time.Now().After(deadline) {
			t.Fatalf("%s: GOMAXPROCS %d, want %d within 10 s", when, runtime.GOMAXPROCS(0), want)
		}
		time.Sleep(5 * time.Millisecond)
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
