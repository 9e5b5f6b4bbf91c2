package kv

import (
	"slices"
	"strings"
	"testing"

	"github.com/narwhal-router/narwhal/config"
)

// The configuration accepts exactly the connectors Narwhal ships, so a name that passes
// config validation always finds its connector.
func TestBuiltinRegistryMatchesTheConfigurationsConnectors(t *testing.T) {
	got := Builtin().Names()
	want := slices.Sorted(slices.Values(config.Connectors))
	if !slices.Equal(got, want) {
		t.Fatalf("kv.Builtin has %v, config.Connectors lists %v", got, want)
	}
	if c, err := Builtin().For(""); err != nil || c.Name() != config.ConnectorNIXL {
		t.Fatalf("default connector %v, %v", c, err)
	}
	if _, err := Builtin().Lookup("mooncake"); err == nil || !strings.Contains(err.Error(), "known: nixl") {
		t.Fatalf("unknown connector error %v", err)
	}
}

type namedConnector struct{ nixlConnector }

func (namedConnector) Name() string { return "other" }

func TestWithAddsWithoutChangingTheOriginal(t *testing.T) {
	b := Builtin()
	r := b.With(namedConnector{})
	if !slices.Equal(r.Names(), []string{"nixl", "other"}) || !slices.Equal(b.Names(), []string{"nixl"}) {
		t.Fatalf("with: %v, builtin after: %v", r.Names(), b.Names())
	}
}
