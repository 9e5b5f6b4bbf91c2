package actors

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/narwhal-router/narwhal/bench/sim"
	"github.com/narwhal-router/narwhal/config"
	"github.com/narwhal-router/narwhal/transport"
	"github.com/narwhal-router/narwhal/transport/kv"
)

// provision is cfg's engines as a router runs them: the configuration validated, the engines
// provisioned with Narwhal's own connectors.
func provision(t testing.TB, cfg config.Config) []transport.EngineSpec {
	t.Helper()
	if err := cfg.Validate(kv.Builtin()); err != nil {
		t.Fatal(err)
	}
	specs, err := transport.NewProvisioner(kv.Builtin(), cfg.ReservedPorts()).Engines(cfg.Engines, "file")
	if err != nil {
		t.Fatal(err)
	}
	return specs
}

// newRouter starts a router for cfg, closed with the test.
func newRouter(t testing.TB, cfg config.Config, opts Options) *Router {
	t.Helper()
	r, err := NewRouter(cfg, provision(t, cfg), opts)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(r.Close)
	return r
}

// simRouter starts a simulated fleet of p0 and decoders consumers (d0, d1, …) and a router in
// front of it (cfg tweaked by tweak), both closed with the test, and waits until every engine
// passed its join check.
func simRouter(t *testing.T, decoders int, tweak func(*config.Config), opts Options) (*Router, *sim.Fleet) {
	t.Helper()
	fleet, err := sim.StartFleet(sim.FleetOptions{Prefill: 1, Decode: decoders, Engine: sim.Options{Models: []string{"m"}}})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { fleet.Close() })
	cfg := config.Default()
	for _, e := range fleet.Engines {
		cfg.Engines = append(cfg.Engines, config.Engine{Name: e.Name(), URL: e.URL(), Role: config.Role(e.Role()),
			Models: e.Models(), KV: config.KV{Connector: kv.NIXL, Endpoint: e.KVEndpoint(), TransferModes: []string{"pull"}}})
	}
	if tweak != nil {
		tweak(&cfg)
	}
	r := newRouter(t, cfg, opts)
	waitAdmitted(t, r)
	return r, fleet
}

// waitAdmitted waits until every engine of r is admitted (its join check passed).
func waitAdmitted(t *testing.T, r *Router) {
	t.Helper()
	var last string
	waitWithin(t, 5*time.Second, func() string { return "engines not admitted: " + last }, func() bool {
		es, err := r.Engines(context.Background())
		if err != nil {
			t.Fatal(err)
		}
		last = ""
		for _, e := range es {
			if e.State != "admitted" {
				last += fmt.Sprintf("%s %s %+v; ", e.Name, e.State, e.JoinCheck)
			}
		}
		return last == ""
	})
}
