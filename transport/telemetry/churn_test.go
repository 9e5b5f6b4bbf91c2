package telemetry

import (
	"fmt"
	"runtime"
	"testing"
	"time"

	"github.com/narwhal-router/narwhal/config"
	"github.com/narwhal-router/narwhal/internal/testwait"
)

// recordEngine records every per-engine metric once for engine, as a fleet's engine does in
// its life (faults, state, probes, scrapes, KV events, descriptors).
func recordEngine(m *Metrics, engine string) {
	m.EngineFault(engine, "decode", "silence", "bad_descriptor")
	m.EngineInflight(engine, 1, 2)
	m.EngineState(engine, "admitted", []string{"joining", "admitted", "ejected"})
	m.BreakerTransition(engine, "closed", "open")
	m.ClusterVerdict(engine, "open", "published")
	m.ProbeResult(engine, "success")
	m.JoinCheck(engine, "success")
	m.EngineScrape(engine, "ok")
	m.KVEvents(engine, "batch")
	m.KVIndexBlocks(engine, 7)
	m.EngineLoad(engine, 1, 2, 0.5)
	m.MissingDescriptor(engine, "retry")
}

// Every engine name ever seen must not cost memory for good: Kubernetes names engines by pod
// name and UID, so a cluster that rolls daily brings new names without end. Ten cycles of 1,000
// uniquely named engines added, reported and removed leave the heap within 10% of the first
// cycle's.
func TestEngineChurnLeavesHeapFlat(t *testing.T) {
	r, err := newReporting(config.Metrics{}, 50*time.Millisecond)
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	m := r.Metrics
	// waitFlushes waits until n more reports have run.
	waitFlushes := func(n uint64) {
		target := r.flushes.Load() + n
		testwait.Until(t, 10*time.Second, func() bool { return r.flushes.Load() >= target },
			func() string { return fmt.Sprintf("%d reports, want %d", r.flushes.Load(), target) })
	}
	heap := func() uint64 {
		runtime.GC()
		runtime.GC()
		var ms runtime.MemStats
		runtime.ReadMemStats(&ms)
		return ms.HeapAlloc
	}
	var first uint64
	for cycle := range 10 {
		names := make([]string, 1000)
		for i := range names {
			names[i] = fmt.Sprintf("decode-%d-%d-5f9c2a7e-0d1b-4c8e-9a3f", cycle, i)
			m.RememberEngine(names[i])
			recordEngine(m, names[i])
		}
		waitFlushes(2) // reported, so exported
		for _, name := range names {
			m.ForgetEngine(name)
		}
		waitFlushes(3) // the last report of what was forgotten, and whatever it releases
		h := heap()
		t.Logf("cycle %d: heap %d KiB", cycle+1, h>>10)
		if cycle == 0 {
			first = h
		}
		if cycle == 9 && float64(h) > 1.1*float64(first) {
			t.Fatalf("after 10 cycles of 1,000 engines the heap is %.1f MiB, the first cycle's %.1f MiB (+%.0f%%)",
				float64(h)/(1<<20), float64(first)/(1<<20), 100*(float64(h)/float64(first)-1))
		}
	}
}
