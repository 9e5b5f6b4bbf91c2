package sourcetest

import (
	"log/slog"
	"testing"

	"github.com/narwhal-router/narwhal/transport"
	"github.com/narwhal-router/narwhal/transport/discovery"
	"github.com/narwhal-router/narwhal/transport/kv"
)

// Catalog runs src in a catalog that provisions its engines as a router whose listeners are on
// reserved would (the built-in connectors), logging to log; it stops with the test. Its
// Status shows what src's engines became: in the fleet, or skipped and why.
func Catalog(t *testing.T, src discovery.Source, log *LogBuffer, reserved ...int) *discovery.Catalog {
	t.Helper()
	cat, err := discovery.NewCatalog([]discovery.Source{src}, discovery.Options{
		Engines: transport.NewProvisioner(kv.Builtin(), reserved),
		Apply:   func([]transport.EngineSpec) error { return nil },
		Logger:  slog.New(slog.NewTextHandler(log, nil)),
	})
	if err != nil {
		t.Fatal(err)
	}
	cat.Start()
	t.Cleanup(cat.Close)
	return cat
}
