// Package procs sizes the Go scheduler (GOMAXPROCS) to the router's load.
//
// A lightly loaded router spends a large share of its CPU waking threads, not relaying bytes:
// each goroutine readied while a P is idle wakes an OS thread to look for it, which spins and
// parks again (futex, epoll_pwait and nanosleep: bench/README.md, issue #17). With one P a
// readied goroutine waits for the running one to block instead — a few microseconds at low
// load — and those wake-ups are gone. Under load one P would queue work, so the controller
// grows the Ps as soon as the process is busy and shrinks them only after a sustained lull:
//
//   - every Interval it reads the process's CPU time (CLOCK_PROCESS_CPUTIME_ID) and the
//     scheduler's run-queue latencies (runtime/metrics /sched/latencies:seconds);
//   - it doubles the Ps (up to Max) when the process's CPU use, smoothed over about a third of
//     DownAfter, is above UpBusy cores per P, when the p99 time a goroutine waited to run
//     exceeded UpWait in the last interval, or at once when every P was busy in it;
//   - it halves them when, for DownAfter, the smoothed load stayed under half of what would
//     grow the halved size again and goroutines did not queue.
//
// Changing GOMAXPROCS stops the world for a few tens of microseconds; the hysteresis keeps
// changes to load transitions, not steady load. The trade (why server.procs is "all" unless an
// operator asks for "auto"): a burst of simultaneous requests reaching an idle router is served
// by one CPU until the next sample sees it, which shows in first-byte p99 under bursty load.
package procs

import (
	"math"
	"runtime"
	"runtime/metrics"
	"sync"
	"time"

	"golang.org/x/sys/unix"
)

// Options tunes a Controller. Zero values take the defaults below.
type Options struct {
	// Max is the most Ps the controller uses (default: GOMAXPROCS when Start runs, i.e. the
	// machine's or the container's CPUs).
	Max int
	// Interval is the sampling period (default 50 ms).
	Interval time.Duration
	// UpBusy is the smoothed CPU use per P, in cores, past which the Ps double (default 0.25).
	UpBusy float64
	// UpWait is the p99 run-queue wait past which the Ps double (default 250 µs).
	UpWait time.Duration
	// DownAfter is how long the load must stay low before the Ps halve (default 3 s).
	DownAfter time.Duration
	// OnChange, if set, is called after each change (and once at Start) with the Ps in use.
	OnChange func(procs int)
}

const (
	defaultInterval  = 50 * time.Millisecond
	defaultUpBusy    = 0.25
	defaultUpWait    = 250 * time.Microsecond
	defaultDownAfter = 3 * time.Second
	// minWaitSamples is how many run-queue observations an interval needs before its p99 counts.
	minWaitSamples = 64
)

func (o Options) withDefaults() Options {
	if o.Max <= 0 {
		o.Max = runtime.GOMAXPROCS(0)
	}
	if o.Interval <= 0 {
		o.Interval = defaultInterval
	}
	if o.UpBusy <= 0 {
		o.UpBusy = defaultUpBusy
	}
	if o.UpWait <= 0 {
		o.UpWait = defaultUpWait
	}
	if o.DownAfter <= 0 {
		o.DownAfter = defaultDownAfter
	}
	return o
}

// Controller owns the process's GOMAXPROCS while it runs.
type Controller struct {
	opts  Options
	stop  chan struct{}
	done  chan struct{}
	once  sync.Once
	sizer sizer
}

// Start sets GOMAXPROCS to 1 and keeps it sized to the load until Stop.
func Start(o Options) *Controller {
	o = o.withDefaults()
	c := &Controller{opts: o, stop: make(chan struct{}), done: make(chan struct{}),
		sizer: newSizer(o)}
	c.apply(1)
	go c.run()
	return c
}

// Stop ends the controller and gives the process Max Ps again. A nil Controller is a no-op.
func (c *Controller) Stop() {
	if c == nil {
		return
	}
	c.once.Do(func() {
		close(c.stop)
		<-c.done
		runtime.GOMAXPROCS(c.opts.Max)
	})
}

func (c *Controller) apply(n int) {
	runtime.GOMAXPROCS(n)
	if c.opts.OnChange != nil {
		c.opts.OnChange(n)
	}
}

func (c *Controller) run() {
	defer close(c.done)
	tick := time.NewTicker(c.opts.Interval)
	defer tick.Stop()
	waits := newWaitReader()
	lastCPU, lastAt := processCPU(), time.Now()
	for {
		select {
		case <-c.stop:
			return
		case now := <-tick.C:
			cpu := processCPU()
			busy := 0.0
			if dt := now.Sub(lastAt); dt > 0 {
				busy = float64(cpu-lastCPU) / float64(dt)
			}
			lastCPU, lastAt = cpu, now
			if n, changed := c.sizer.step(now, busy, waits.p99()); changed {
				c.apply(n)
			}
		}
	}
}

// sizer is the controller's decision, kept apart from the clock and the runtime so that it can
// be tested sample by sample.
type sizer struct {
	max, procs int
	upBusy     float64
	upWait     time.Duration
	downAfter  time.Duration
	// smoothing is the weight of a new sample in avg, the smoothed busy cores (an exponential
	// average over about a third of downAfter): a lull is judged on it, so a periodic burst —
	// a metrics flush, a GC cycle — does not keep a quiet router at its peak size.
	smoothing float64
	avg       float64
	// lowSince is when the current lull began (zero: not in one).
	lowSince time.Time
}

// saturated is the share of every P's time busy that grows the Ps on a single sample.
const saturated = 0.9

func newSizer(o Options) sizer {
	return sizer{max: o.Max, procs: 1, upBusy: o.UpBusy, upWait: o.UpWait, downAfter: o.DownAfter,
		smoothing: min(1, 3*float64(o.Interval)/float64(o.DownAfter))}
}

// step takes one interval's sample — busy cores and the p99 run-queue wait (negative: too few
// observations to tell) — and returns the Ps to use and whether that is a change.
func (s *sizer) step(now time.Time, busy float64, waitP99 time.Duration) (int, bool) {
	s.avg += s.smoothing * (busy - s.avg)
	// Grow on a sustained load, on goroutines queueing, or at once when every P is busy. A
	// burst of CPU alone (one goroutine flushing metrics) queues nothing and grows nothing.
	grow := s.avg > s.upBusy*float64(s.procs) || waitP99 > s.upWait || busy >= saturated*float64(s.procs)
	if s.procs < s.max && grow {
		s.procs = min(s.max, 2*s.procs)
		s.lowSince = time.Time{}
		return s.procs, true
	}
	// A lull: the smoothed load is under half of what would grow the halved size again, and
	// goroutines are not queueing.
	half := max(1, s.procs/2)
	if s.procs == 1 || s.avg >= s.upBusy*float64(half)/2 || waitP99 > s.upWait/2 {
		s.lowSince = time.Time{}
		return s.procs, false
	}
	if s.lowSince.IsZero() {
		s.lowSince = now
	}
	if now.Sub(s.lowSince) < s.downAfter {
		return s.procs, false
	}
	s.procs, s.lowSince = half, time.Time{}
	return s.procs, true
}

// processCPU is the CPU time the process has used, all threads, in nanoseconds.
func processCPU() int64 {
	var ts unix.Timespec
	if err := unix.ClockGettime(unix.CLOCK_PROCESS_CPUTIME_ID, &ts); err != nil {
		return 0
	}
	return ts.Nano()
}

// waitReader reads the scheduler's run-queue latency histogram and reports each interval's p99.
type waitReader struct {
	sample []metrics.Sample
	last   []uint64
}

const schedLatencies = "/sched/latencies:seconds"

func newWaitReader() *waitReader {
	w := &waitReader{sample: []metrics.Sample{{Name: schedLatencies}}}
	metrics.Read(w.sample)
	if w.sample[0].Value.Kind() == metrics.KindFloat64Histogram {
		w.last = append([]uint64(nil), w.sample[0].Value.Float64Histogram().Counts...)
	}
	return w
}

// p99 is the 99th percentile of the waits observed since the last call, or -1 when fewer than
// minWaitSamples were observed.
func (w *waitReader) p99() time.Duration {
	metrics.Read(w.sample)
	if w.sample[0].Value.Kind() != metrics.KindFloat64Histogram {
		return -1
	}
	h := w.sample[0].Value.Float64Histogram()
	if len(w.last) != len(h.Counts) {
		w.last = make([]uint64, len(h.Counts))
	}
	for i, n := range h.Counts {
		w.last[i] = n - w.last[i] // the interval's counts, until the copy below
	}
	p := p99Of(w.last, h.Buckets)
	copy(w.last, h.Counts)
	return p
}

// p99Of is the 99th percentile of a histogram's counts (counts[i] between buckets[i] and
// buckets[i+1]) as the upper bound of its bucket, or -1 under minWaitSamples observations.
func p99Of(counts []uint64, buckets []float64) time.Duration {
	var total uint64
	for _, n := range counts {
		total += n
	}
	if total < minWaitSamples {
		return -1
	}
	rank := total - total/100 // this many observations are at or below the p99
	var seen uint64
	for i, n := range counts {
		if seen += n; seen >= rank {
			upper := buckets[i+1]
			if math.IsInf(upper, 1) {
				upper = buckets[i]
			}
			return time.Duration(upper * float64(time.Second))
		}
	}
	return -1
}
