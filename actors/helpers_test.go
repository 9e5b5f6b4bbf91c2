package actors

import (
	"testing"

	"github.com/narwhal-router/narwhal/config"
	"github.com/narwhal-router/narwhal/transport/kv"
)

// provision is cfg as a router runs it (config.Provision with Narwhal's own connectors).
func provision(t testing.TB, cfg config.Config) config.Runtime {
	t.Helper()
	rt, err := config.Provision(cfg, kv.Builtin())
	if err != nil {
		t.Fatal(err)
	}
	return rt
}

// newRouter starts a router for cfg, closed with the test.
func newRouter(t testing.TB, cfg config.Config, opts Options) *Router {
	t.Helper()
	r, err := NewRouter(provision(t, cfg), opts)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(r.Close)
	return r
}

// recoveryWith is the default recovery section, with eject_after 3 and probes every 1 to 4 s,
// tweaked and provisioned.
func recoveryWith(t testing.TB, tweak func(*config.Recovery)) config.RecoveryRuntime {
	t.Helper()
	cfg := config.Default()
	cfg.Recovery.EjectAfter, cfg.Recovery.ProbeIntervalS, cfg.Recovery.ProbeMaxIntervalS = 3, 1, 4
	if tweak != nil {
		tweak(&cfg.Recovery)
	}
	cfg.Engines = []config.Engine{{Name: "e0", URL: "http://127.0.0.1:1", Role: config.RoleBoth}}
	return provision(t, cfg).Recovery
}
