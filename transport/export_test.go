package transport

import (
	"testing"
	"time"

	"github.com/narwhal-router/narwhal/config"
	"github.com/narwhal-router/narwhal/transport/kv"
)

// ClientFor is a client for engine e provisioned as the router provisions its engines (a
// Provisioner with Narwhal's own connectors), from the default configuration with edit applied
// (nil: none), which must be valid. It is closed with the test. The tests of this package and of
// transport_test share it.
func ClientFor(tb testing.TB, e config.Engine, edit func(*config.Config)) *EngineClient {
	tb.Helper()
	cfg := config.Default()
	// A peer that can run either leg makes a fleet of one engine valid.
	cfg.Engines = []config.Engine{e, {Name: e.Name + "-peer", URL: "http://127.0.0.1:1", Role: config.RoleBoth}}
	if edit != nil {
		edit(&cfg)
	}
	if err := cfg.Validate(kv.Builtin()); err != nil {
		tb.Fatal(err)
	}
	specs, err := NewProvisioner(kv.Builtin(), cfg.ReservedPorts()).Engines(cfg.Engines, "test")
	if err != nil {
		tb.Fatal(err)
	}
	c := NewEngineClient(specs[0], cfg.Engine, cfg.Server.MaxResponseBytes)
	tb.Cleanup(c.Close)
	return c
}

// SetNameBounds shortens the host name lookups' bounds of p (and its copies) and gives them a
// clock, for tests of the bounds themselves.
func SetNameBounds(p Provisioner, timeout, budget time.Duration, now func() time.Time) {
	p.names.mu.Lock()
	defer p.names.mu.Unlock()
	p.names.timeout, p.names.budget, p.names.now = timeout, budget, now
}
