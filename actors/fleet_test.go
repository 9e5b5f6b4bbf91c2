package actors

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/narwhal-router/narwhal/bench/sim"
	"github.com/narwhal-router/narwhal/config"
	"github.com/narwhal-router/narwhal/transport"
	"github.com/narwhal-router/narwhal/transport/kv"
)

// A fleet that starts all at once joins at once, even with a minute between probes: the
// producers are judged on their prefill, and each consumer's check, inconclusive while no
// producer is admitted, runs again the moment one is — with that producer's handoff.
func TestAFleetStartingAllAtOnceJoinsPromptly(t *testing.T) {
	began := time.Now()
	r, _ := simRouter(t, 3, func(c *config.Config) {
		c.Recovery.ProbeIntervalS, c.Recovery.ProbeMaxIntervalS = 60, 60
		c.Disaggregation.Policy = config.DisaggAlways
	}, Options{})
	if took := time.Since(began); took > 3*time.Second {
		t.Fatalf("the fleet took %v to join with a 60 s probe interval", took)
	}
	for _, name := range []string{"d0", "d1", "d2"} {
		e := describeEngine(t, r, name)
		if e.JoinCheck == nil || e.JoinCheck.Result != probeSuccess || e.JoinCheck.Partner != "p0" || e.LastProbe != nil {
			t.Fatalf("%s joined by %+v (last probe %+v), want a check with p0's handoff and no readmission probe", name, e.JoinCheck, e.LastProbe)
		}
	}
	if p := describeEngine(t, r, "p0").JoinCheck; p == nil || p.Result != probeSuccess {
		t.Fatalf("p0 joined by %+v", p)
	}
}

// Readiness follows the policy: always needs an admitted producer and consumer, auto and never
// a consumer only (auto decodes locally without a producer); the reason names the role and where
// its engines stand.
func TestReadinessFollowsThePolicy(t *testing.T) {
	r, _ := simRouter(t, 1, func(c *config.Config) { c.Disaggregation.Policy = config.DisaggAlways }, Options{})
	ctx := context.Background()
	if ready, why := r.Ready(); !ready {
		t.Fatalf("not ready with everything admitted: %s", why)
	}
	if _, err := r.Eject(ctx, "p0", "test"); err != nil {
		t.Fatal(err)
	}
	ready, why := r.Ready()
	if ready || why != "no admitted engine can run the prefill leg (p0 ejected [test]); disaggregation.policy always needs an admitted prefill and an admitted decode engine" {
		t.Fatalf("always without a producer: %v %q", ready, why)
	}
	next := r.rt
	next.Disaggregation.Policy = config.DisaggAuto
	r.Reconfigure(next)
	if ready, why := r.Ready(); !ready {
		t.Fatalf("auto without a producer (it decodes locally): not ready: %s", why)
	}
	if _, err := r.Eject(ctx, "d0", "test"); err != nil {
		t.Fatal(err)
	}
	if ready, why := r.Ready(); ready || !strings.HasPrefix(why, "no admitted engine can run the decode leg (d0 ejected [test])") {
		t.Fatalf("auto without a consumer: %v %q", ready, why)
	}
	if err := r.SetEngines(ctx, nil); err != nil {
		t.Fatal(err)
	}
	if ready, why := r.Ready(); ready || !strings.Contains(why, "no engine of the fleet can run it") {
		t.Fatalf("an empty fleet: %v %q", ready, why)
	}
}

// SetEngines diffs by name: a new name joins, a missing one leaves (its actor stops, its
// prefix bit is taken back), and a spec that changed is a new engine with a fresh breaker —
// an operator's ejection of the old one does not carry over.
func TestSetEnginesDiffsByName(t *testing.T) {
	r, fleet := simRouter(t, 2, nil, Options{})
	ctx := context.Background()
	specs := func(mutate func(name string, e *config.Engine)) []transport.EngineSpec {
		var out []transport.EngineSpec
		for _, e := range fleet.Engines {
			ce := config.Engine{Name: e.Name(), URL: e.URL(), Role: config.Role(e.Role()), Models: e.Models(),
				KV: config.KV{Connector: kv.NIXL, Endpoint: e.KVEndpoint(), TransferModes: []string{"pull"}}}
			if mutate != nil {
				mutate(e.Name(), &ce)
			}
			if ce.Name == "" {
				continue
			}
			s, err := transport.NewProvisioner(kv.Builtin(), nil).Engine(ce)
			if err != nil {
				t.Fatal(err)
			}
			s.Source = "test"
			out = append(out, s)
		}
		return out
	}
	d1 := r.fleet.Load().Engine("d1")
	if _, err := r.Eject(ctx, "d0", "maintenance"); err != nil {
		t.Fatal(err)
	}
	// d0 with another max_inflight (a new engine), d1 gone.
	if err := r.SetEngines(ctx, specs(func(name string, e *config.Engine) {
		switch name {
		case "d0":
			e.MaxInflight = 7
		case "d1":
			e.Name = ""
		}
	})); err != nil {
		t.Fatal(err)
	}
	if v := r.fleet.Load().Engine("d1"); v != nil {
		t.Fatal("d1 is still placeable after it left the desired set")
	}
	waitFor(t, "d1's actor never stopped", func() bool {
		for _, st := range *r.all.Load() {
			if st.spec.Name == "d1" {
				return false
			}
		}
		return true
	})
	if !r.fleet.Index.Retired(d1.Idx) {
		t.Fatalf("d1's prefix bit %d was not taken back", d1.Idx)
	}
	waitAdmitted(t, r)
	e := describeEngine(t, r, "d0")
	if e.MaxInflight != 7 || e.EjectedBy != "" || e.Source != "test" || e.JoinCheck == nil {
		t.Fatalf("the changed d0: %+v, want a new engine (max_inflight 7, joined afresh, not ejected)", e)
	}
}

// A consumer whose only producer fails its own join check is not left waiting for it: the
// moment the producer is out, the consumer's check runs again, with a local decode (under auto a
// request decodes alone when no producer is admitted), a minute's probe interval notwithstanding.
func TestAConsumerDoesNotWaitForAProducerThatFailedToJoin(t *testing.T) {
	fleet, err := sim.StartFleet(sim.FleetOptions{Prefill: 1, Decode: 1, Engine: sim.Options{Models: []string{"m"}}})
	if err != nil {
		t.Fatal(err)
	}
	defer fleet.Close()
	if err := fleet.Engine("p0").InjectFault("any.status=500", 1000); err != nil {
		t.Fatal(err)
	}
	cfg := config.Default()
	cfg.Recovery.ProbeIntervalS, cfg.Recovery.ProbeMaxIntervalS = 60, 60
	for _, e := range fleet.Engines {
		cfg.Engines = append(cfg.Engines, config.Engine{Name: e.Name(), URL: e.URL(), Role: config.Role(e.Role()),
			Models: e.Models(), KV: config.KV{Connector: kv.NIXL, Endpoint: e.KVEndpoint(), TransferModes: []string{"pull"}}})
	}
	r := newRouter(t, cfg, Options{})
	waitWithin(t, 3*time.Second, func() string { return fmt.Sprintf("d0: %+v", describeEngine(t, r, "d0")) }, func() bool {
		return describeEngine(t, r, "d0").State == "admitted"
	})
	if j := describeEngine(t, r, "d0").JoinCheck; !strings.Contains(j.Reason, "local decode") {
		t.Fatalf("d0 joined by %+v", j)
	}
	// p0 is out: ejected by its join check, or being probed by the whole-wave rule (every
	// producer is ejected), which a minute's probe interval does not hold back.
	if p := describeEngine(t, r, "p0"); (p.State != "ejected" && p.State != "probing") || p.JoinCheck == nil || p.JoinCheck.Result != "failure" {
		t.Fatalf("p0: %+v (join check %+v)", p, p.JoinCheck)
	}
	if ready, why := r.Ready(); !ready {
		t.Fatalf("auto with a consumer admitted: not ready: %s", why)
	}
}
