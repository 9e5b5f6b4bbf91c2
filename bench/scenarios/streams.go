package scenarios

import (
	"fmt"
	"slices"
	"syscall"
	"time"

	"github.com/narwhal-router/narwhal/bench/harness"
	"github.com/narwhal-router/narwhal/bench/loadgen"
	"github.com/narwhal-router/narwhal/bench/report"
)

const (
	streamsWanted = 10000
	// streamsOpenRate is how fast streams are opened: each opening is a routed request, and
	// with thousands of streams already relaying, faster openings saturate this machine.
	streamsOpenRate = 400.0
	// streamsHold is how long every stream is kept open once all are streaming; then the
	// generator hangs up on them all (the router must let go of every one).
	streamsHold = 8 * time.Second
	// streamsTokens bounds each stream well past the opening and the hold (1 token/s).
	streamsTokens = 300
	// fdHeadroom is what the router needs besides two sockets per stream: listeners, pooled
	// prefill connections (hundreds while openings queue), epoll, files.
	fdHeadroom = 1500
)

// FileLimit is the descriptor limit the harness asks for: the streams scenario needs about
// 20,000 in the router (client + engine sockets) and 10,000 in the generator and the fleet.
const FileLimit = 65536

// Streams holds 10,000 streaming requests open through the router at one token per second and
// measures the router's RSS per stream above its idle baseline (with the Go runtime's own
// breakdown), its CPU per relayed token with that many connections open, and that it lets go
// of every stream when the clients hang up.
func Streams(env harness.Env) (*report.Section, error) {
	n := streamsWanted
	if env.Quick {
		n = 2000
	}
	sec := report.NewSection("streams", fmt.Sprintf("%s concurrent streams at 1 token/s: router RSS per stream", report.Num(float64(n))))
	// The router holds two sockets per stream (client and engine); without the privilege to
	// raise the hard RLIMIT_NOFILE the machine may not allow 10,000.
	var lim syscall.Rlimit
	if err := syscall.Getrlimit(syscall.RLIMIT_NOFILE, &lim); err == nil && int(lim.Cur) < 2*n+fdHeadroom {
		n = (int(lim.Cur) - fdHeadroom) / 2
		sec.Printf("NOTE: RLIMIT_NOFILE is %d and cannot be raised here (no CAP_SYS_RESOURCE). The router holds two", lim.Cur)
		sec.Printf("sockets per stream, so this run holds %s streams; raise the hard limit (ulimit -Hn 65536) for %s.",
			report.Num(float64(n)), report.Num(streamsWanted))
	}
	rc := harness.DefaultRouterConfig()
	rc.MaxQueue, rc.DeadlineS, rc.DecodeReadTimeoutS = 2*n, 600, 10
	rig, err := harness.StartRig(env, harness.RigOptions{
		Fleet:    harness.FleetOptions{Prefill: 2, Decode: 2, TTFT: 5 * time.Millisecond, ITL: time.Second, Tokens: streamsTokens},
		Router:   rc,
		MaxConns: n + 1000,
	})
	if err != nil {
		return nil, err
	}
	defer rig.Close()

	harness.Logf("streams: warming up, then the idle baseline")
	if _, err := rig.Run(loadgen.Phase{Name: "warmup", Arm: loadgen.Routed, Mode: loadgen.Closed, Concurrency: 64,
		Duration: env.Scale(2 * time.Second), MaxTokens: 1, PromptWords: promptWords, Guard: 30 * time.Second}); err != nil {
		return nil, err
	}
	time.Sleep(2 * time.Second)
	base, err := rssSamples(rig.Router, 3, 500*time.Millisecond)
	if err != nil {
		return nil, err
	}
	baseKiB := median(base)
	baseMem, _ := goMemory(rig.Router)
	before, err := routerOutcomes(rig.Router)
	if err != nil {
		return nil, err
	}

	var held []int64
	var heldMem memory
	var streaming int
	var heldCPU harness.Usage
	var heldWall time.Duration
	var heldErr error
	onStreaming := func(ev loadgen.Event) {
		streaming = ev.Streaming
		harness.Logf("streams: %d streaming after %s; sampling the router", ev.Streaming, ev.After.Round(time.Millisecond))
		time.Sleep(500 * time.Millisecond)
		u0, err := harness.ReadUsage(rig.Router.Proc.Pid())
		if err != nil {
			heldErr = err
			return
		}
		t0 := time.Now()
		if held, err = rssSamples(rig.Router, 5, time.Second); err != nil {
			heldErr = err
			return
		}
		u1, err := harness.ReadUsage(rig.Router.Proc.Pid())
		if err != nil {
			heldErr = err
			return
		}
		heldWall = time.Since(t0)
		heldCPU = harness.Usage{CPU: u1.CPU - u0.CPU, Threads: u1.Threads}
		heldMem, _ = goMemory(rig.Router)
		if env.Profile {
			_ = rig.Router.HeapProfile(env.Path("heap-streams.pprof"))
		}
	}
	harness.Logf("streams: opening %d streams at %.0f/s, holding them %s once all stream", n, streamsOpenRate, streamsHold)
	w, err := rig.RunEvents(loadgen.Phase{Name: "hold", Arm: loadgen.Routed, Mode: loadgen.Hold, Streams: n,
		Rate: streamsOpenRate, HoldFor: streamsHold, MaxTokens: streamsTokens, PromptWords: promptWords, Guard: 5 * time.Minute},
		onStreaming)
	if err != nil {
		return nil, err
	}
	if heldErr != nil {
		return nil, heldErr
	}
	if len(held) == 0 {
		return nil, fmt.Errorf("streams: the generator never reported the streams as open")
	}
	// The router finishes a hung-up stream within a token or so; its counters follow on the
	// next flush. Give it a few seconds.
	var counted int
	for deadline := time.Now().Add(10 * time.Second); ; {
		after, err := routerOutcomes(rig.Router)
		if err != nil {
			return nil, err
		}
		counted = after.total - before.total
		if counted >= w.Result.Sent || time.Now().After(deadline) {
			break
		}
	}
	heldKiB := median(held)
	perStream := float64(heldKiB-baseKiB) / float64(max(streaming, 1))
	tokensHeld := float64(streaming) * heldWall.Seconds() // one token per stream per second
	cpuPerToken := float64(heldCPU.CPU.Microseconds()) / max(tokensHeld, 1)
	fb := loadgen.Summarize(w.Result.FirstByte)
	perStreamKiB := func(a, b float64) string { return report.Num((a - b) / 1024 / float64(max(streaming, 1))) }

	t := report.NewTable("", "idle", "all streaming", "per stream (KiB)")
	t.Row("router RSS (MiB)", report.Num(float64(baseKiB)/1024), report.Num(float64(heldKiB)/1024), report.Num(perStream))
	t.Row("  Go heap in use (MiB)", mib(baseMem.heapInuse), mib(heldMem.heapInuse), perStreamKiB(heldMem.heapInuse, baseMem.heapInuse))
	t.Row("  goroutine stacks (MiB)", mib(baseMem.stackInuse), mib(heldMem.stackInuse), perStreamKiB(heldMem.stackInuse, baseMem.stackInuse))
	t.Row("  next GC target (MiB)", mib(baseMem.nextGC), mib(heldMem.nextGC), "")
	t.Row("router goroutines", report.Num(baseMem.goroutines), report.Num(heldMem.goroutines),
		report.Num((heldMem.goroutines-baseMem.goroutines)/float64(max(streaming, 1))))
	sec.Add(t.String())
	sec.Printf("streams opened %s; all streaming at once: %s (after %s); hung up by the generator after %s: %s; ended otherwise: ok %s, failed %s",
		report.Num(float64(w.Result.Sent)), report.Num(float64(streaming)), w.Result.StreamingAfter.Round(time.Millisecond),
		streamsHold, report.Num(float64(w.Result.Released)), report.Num(float64(w.Result.OK)),
		report.Num(float64(w.Result.ErrorCount()+w.Result.ViolationCount())))
	sec.Printf("router while holding: %s of a core, %s µs CPU per relayed token (each token arrives alone: one wake-up, one read, one write); %d threads",
		cpuShare(heldCPU.CPU, heldWall), report.Num(cpuPerToken), heldCPU.Threads)
	sec.Printf("first_byte while opening at %.0f/s: p50 %s ms, p99 %s ms", streamsOpenRate, ms(fb.P50), ms(fb.P99))
	sec.Printf("router's own count of finished requests after the hang-up: %d for %d sent (%s)", counted, w.Result.Sent,
		map[bool]string{true: "every stream let go", false: "MISMATCH: streams still held or counted twice"}[counted == w.Result.Sent])
	sec.Printf("RSS is VmRSS (median of 5 samples, 1 s apart, once every stream had its first token) minus the idle median")
	sec.Printf("after a warm-up; the breakdown is the Go runtime's (go_memstats_* on /metrics). It includes garbage not yet collected.")
	if bad := w.Result.ErrorCount() + w.Result.ViolationCount(); bad > 0 {
		sec.Printf("failed streams: %s %s", mix(w.Result.Errors), mix(w.Result.Violations))
	}
	if env.Profile {
		file := env.Path("heap-streams.pprof")
		sec.Printf("")
		sec.Printf("Heap in use with every stream open (%s), top by flat:", file)
		sec.Add(profileTop(env, file, 15, "-sample_index=inuse_space"))
	}

	sec.Figure("rss_kib_per_stream", perStream)
	sec.Figure("streams", streaming)
	sec.Figure("router_rss_idle_mib", float64(baseKiB)/1024)
	sec.Figure("router_rss_held_mib", float64(heldKiB)/1024)
	sec.Figure("heap_kib_per_stream", (heldMem.heapInuse-baseMem.heapInuse)/1024/float64(max(streaming, 1)))
	sec.Figure("stack_kib_per_stream", (heldMem.stackInuse-baseMem.stackInuse)/1024/float64(max(streaming, 1)))
	sec.Figure("router_goroutines_held", heldMem.goroutines)
	sec.Figure("router_cpu_us_per_token_held", cpuPerToken)
	sec.Figure("streams_failed", w.Result.ErrorCount()+w.Result.ViolationCount())
	sec.Figure("router_counted", counted)
	sec.Target(report.Target{Name: "router RSS per stream", Value: perStream, Unit: "KiB", Limit: 40})
	sec.Target(report.Target{Name: "streams held at once", Value: float64(streaming), Unit: "streams", Limit: streamsWanted, AtLeast: true})
	sec.Target(report.Target{Name: "every stream let go after the hang-up", Boolean: true, Value: b2f(counted == w.Result.Sent)})
	return sec, nil
}

func rssSamples(r *harness.Router, n int, every time.Duration) ([]int64, error) {
	var out []int64
	for i := range n {
		if i > 0 {
			time.Sleep(every)
		}
		u, err := harness.ReadUsage(r.Proc.Pid())
		if err != nil {
			return nil, err
		}
		out = append(out, u.RSSKiB)
	}
	return out, nil
}

func median(v []int64) int64 {
	s := slices.Clone(v)
	slices.Sort(s)
	return s[len(s)/2]
}

// memory is the Go runtime's view of the router's memory, from its /metrics.
type memory struct {
	heapInuse, stackInuse, nextGC, goroutines float64
}

func goMemory(r *harness.Router) (memory, error) {
	var m memory
	for _, f := range []struct {
		name string
		dst  *float64
	}{
		{"go_memstats_heap_inuse_bytes", &m.heapInuse}, {"go_memstats_stack_inuse_bytes", &m.stackInuse},
		{"go_memstats_next_gc_bytes", &m.nextGC}, {"go_goroutines", &m.goroutines},
	} {
		v, err := r.Counter(f.name, "")
		if err != nil {
			return m, err
		}
		*f.dst = v[""]
	}
	return m, nil
}

func mib(b float64) string { return report.Num(b / (1 << 20)) }
