package scenarios

import (
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/narwhal-router/narwhal/bench/harness"
	"github.com/narwhal-router/narwhal/bench/sim"
	"github.com/narwhal-router/narwhal/bench/trace"
)

func TestGoodputSkipsClearlyWithoutTheTrace(t *testing.T) {
	missing := filepath.Join(t.TempDir(), "no-such-trace.jsonl")
	sec, err := Goodput(harness.Env{Dir: t.TempDir(), Trace: missing})
	if err != nil {
		t.Fatal(err)
	}
	if text := sec.Text(); !strings.Contains(text, "SKIPPED") || !strings.Contains(text, missing) {
		t.Fatalf("the skip does not say what is missing:\n%s", text)
	}
}

// An idle engine computes a prompt in steps of at most max_num_batched_tokens, each
// costing the step floor plus the per-token prefill.
func TestPrefillTimeCountsChunks(t *testing.T) {
	e := sim.Options{ITL: 5 * time.Millisecond, ITLPerSeq: 100 * time.Microsecond, PrefillPerToken: 10 * time.Microsecond, MaxNumBatchedTokens: 1000}
	if got, want := prefillTime(e, 500), 5*time.Millisecond+100*time.Microsecond+5*time.Millisecond; got != want {
		t.Errorf("500 tokens: %v, want %v", got, want)
	}
	// 2,500 tokens: chunks of 1000, 1000, 500 — three step floors.
	if got, want := prefillTime(e, 2500), 3*5100*time.Microsecond+25*time.Millisecond; got != want {
		t.Errorf("2,500 tokens: %v, want %v", got, want)
	}
}

// The default SLOs follow the calibration and the workload's median prompt.
func TestDefaultSLOFollowsTheCalibration(t *testing.T) {
	e := goodputEngine()
	rep := &trace.Replay{Requests: []trace.Request{{InputTokens: 100}, {InputTokens: 527}, {InputTokens: 5000}}}
	slo, how := defaultSLO(e, rep)
	if want := sloTTFTFactor * (sim.Calibrated.ITL + sim.Calibrated.ITLPerSeq + 527*sim.Calibrated.PrefillPerToken); slo.TTFT != want {
		t.Errorf("TTFT SLO %v, want %v", slo.TTFT, want)
	}
	if want := sloTPOTFactor * (sim.Calibrated.ITL + sloTypicalBatch*sim.Calibrated.ITLPerSeq); slo.TPOT != want {
		t.Errorf("TPOT SLO %v, want %v", slo.TPOT, want)
	}
	if !strings.Contains(how, "527 tokens") {
		t.Errorf("the derivation does not name the median prompt: %s", how)
	}
}

// A run at rate r sends ⌈r × window⌉ requests.
func TestGoodputRequestsFillTheWindow(t *testing.T) {
	if n := goodputRequests(12.5, 8*time.Second); n != 100 {
		t.Errorf("%d requests", n)
	}
	if n := goodputRequests(0.01, time.Second); n != 2 {
		t.Errorf("%d requests at a tiny rate, want the 2 a rate needs", n)
	}
}

// With overflowing caches, every run of the sweep — the lowest rate's, which sends the fewest
// requests, included — touches at least four times the blocks an engine's cache holds (unless
// one longest prompt's worth, the floor, is more).
func TestOverflowingCachesAreAQuarterOfEveryRun(t *testing.T) {
	window := goodputWindow(false)
	rates := []float64{10, 30, 60}
	rep, err := trace.NewReplay(trace.PrefixGroups(16, 60, 4, 1000, 256, 34), goodputScale(goodputRequests(rates[len(rates)-1], window)))
	if err != nil {
		t.Fatal(err)
	}
	e := goodputEngine()
	_, cache := sweepCache(rep, e, rates[0], window)
	floor := e.MaxModelLen / e.BlockSize
	for _, rate := range rates {
		run := *rep
		run.Requests = rep.Requests[:goodputRequests(rate, window)]
		working, _ := overflowingCache(&run, e)
		if cache > max(floor, working/4) {
			t.Errorf("%g/s: the run touches %d blocks, the cache holds %d: more than a quarter", rate, working, cache)
		}
	}
	if all, _ := overflowingCache(rep, e); cache >= all/4 {
		t.Errorf("the cache (%d blocks) is not below a quarter of the largest run's working set (%d)", cache, all)
	}
}
