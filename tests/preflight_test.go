package tests

import (
	"strings"
	"testing"

	"github.com/narwhal-router/narwhal/bench/sim"
	"github.com/narwhal-router/narwhal/config"
)

// fleetConfig describes a running fleet the way an operator would: identities and KV endpoints
// pinned, the contract the simulator satisfies.
func fleetConfig(f *sim.Fleet) config.Config {
	cfg := config.Default()
	cfg.Engine.FirstTokenTimeoutS = 2
	pinContract(&cfg)
	cfg.Engines = fleetEngines(f)
	for i := range cfg.Engines {
		cfg.Engines[i].Models = nil // discovered, as most operators leave it
	}
	return cfg
}

func TestPreflightPassesOnAHealthyFleetWithAFullMatrix(t *testing.T) {
	f, err := sim.StartFleet(sim.FleetOptions{Prefill: 2, Decode: 2, Both: 1})
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	res := runPreflight(t, fleetConfig(f))
	if !res.OK() {
		t.Fatalf("preflight failed:\n%s", res.Matrix())
	}
	// producers p0 p1 b0 × consumers d0 d1 b0, minus b0→b0
	if len(res.Engines) != 5 || len(res.Pairs) != 3*3-1 {
		t.Fatalf("%d engines, %d pairs:\n%s", len(res.Engines), len(res.Pairs), res.Matrix())
	}
	for _, p := range res.Pairs {
		if p.Report.Tokens == 0 || len(p.Report.Descriptor) == 0 {
			t.Fatalf("%s→%s transferred nothing: %+v", p.Producer, p.Consumer, p.Report)
		}
	}
	if m := res.Matrix(); !strings.Contains(m, "preflight passed") {
		t.Fatalf("matrix:\n%s", m)
	}
	for _, e := range f.Engines {
		if st := e.Stats(); st.BlocksPinned != 0 {
			t.Fatalf("%s still pins %d blocks after preflight", e.Name(), st.BlocksPinned)
		}
	}
}

func TestPreflightFailsNamingTheBrokenPair(t *testing.T) {
	f, err := sim.StartFleet(sim.FleetOptions{Prefill: 2, Decode: 2})
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	f.Engine("d1").InjectFault("decode.status=500", 1) // the first transfer into d1 fails
	cfg := fleetConfig(f)
	cfg.Preflight.Concurrency = 1 // so exactly one pair meets the fault
	res := runPreflight(t, cfg)
	if res.OK() {
		t.Fatalf("preflight passed with a broken pair:\n%s", res.Matrix())
	}
	var failed []string
	for _, p := range res.Pairs {
		if p.Err != nil {
			failed = append(failed, p.Producer+"→"+p.Consumer)
		}
	}
	if len(failed) != 1 || !strings.HasSuffix(failed[0], "→d1") {
		t.Fatalf("failed pairs %v:\n%s", failed, res.Matrix())
	}
	if m := res.Matrix(); !strings.Contains(m, strings.Replace(failed[0], "→", " → ", 1)) || !strings.Contains(m, "preflight FAILED") {
		t.Fatalf("matrix does not name the pair:\n%s", m)
	}
}

func TestPreflightChecksThePinnedContract(t *testing.T) {
	f, err := sim.StartFleet(sim.FleetOptions{Prefill: 1, Decode: 1, Engine: sim.Options{Version: "0.13.0"}})
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	res := runPreflight(t, fleetConfig(f))
	if res.OK() || res.Engines[0].Err == nil || !strings.Contains(res.Engines[0].Err.Error(), `"0.13.0"`) {
		t.Fatalf("a version mismatch passed:\n%s", res.Matrix())
	}
}

// An asymmetric fleet (p0 and d0 run an fp8 KV cache, p1 and d1 the default): preflight reads
// each engine's vllm:cache_config_info, shows the cross pairs incompatible with why, tries only
// the others, and passes, since every engine keeps a partner. With d1 fp8 as well, p1 has no
// consumer left: preflight fails naming it.
func TestPreflightShowsIncompatiblePairsWithWhy(t *testing.T) {
	f, err := sim.StartFleet(sim.FleetOptions{Prefill: 2, Decode: 2})
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	f.Engine("p0").SetKVConfig("", "fp8")
	f.Engine("d0").SetKVConfig("", "fp8")
	res := runPreflight(t, fleetConfig(f))
	m := res.Matrix()
	if !res.OK() {
		t.Fatalf("preflight failed:\n%s", m)
	}
	for _, p := range res.Pairs {
		cross := p.Producer[1] != p.Consumer[1]
		if want := map[bool]string{true: "cache dtype"}[cross]; !strings.HasPrefix(p.Incompatible, want) || (p.Report.Tokens == 0) != cross {
			t.Fatalf("%s→%s: incompatible %q, %d tokens transferred:\n%s", p.Producer, p.Consumer, p.Incompatible, p.Report.Tokens, m)
		}
	}
	for _, want := range []string{"incompatible", "p0 → d1: cache dtype fp8 ≠ auto", "p1 → d0: cache dtype auto ≠ fp8", "preflight passed"} {
		if !strings.Contains(m, want) {
			t.Fatalf("matrix lacks %q:\n%s", want, m)
		}
	}
	if s := f.Engine("d1").Stats(); s.KVLoadFailures != 0 {
		t.Fatalf("an incompatible pair was tried: d1 failed %d KV loads", s.KVLoadFailures)
	}

	f.Engine("d1").SetKVConfig("", "fp8")
	res = runPreflight(t, fleetConfig(f))
	if m := res.Matrix(); res.OK() || !strings.Contains(m, "no compatible partner: p1 (producer)") {
		t.Fatalf("preflight with p1 unpaired:\n%s", m)
	}
}
