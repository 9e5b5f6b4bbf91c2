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
