package kv

import (
	"slices"
	"strings"
	"testing"
)

// Narwhal ships NIXL, which is also the connector of an engine that names none, and Mooncake;
// an unknown name is an error listing the known ones.
func TestBuiltinRegistryHoldsNIXLAsTheDefault(t *testing.T) {
	if got := Builtin().Names(); !slices.Equal(got, []string{Mooncake, NIXL}) {
		t.Fatalf("kv.Builtin has %v, want [mooncake nixl]", got)
	}
	if c, err := Builtin().For(""); err != nil || c.Name() != NIXL || !Builtin().Has(NIXL) {
		t.Fatalf("default connector %v, %v", c, err)
	}
	if _, err := Builtin().Lookup("lmcache"); err == nil || !strings.Contains(err.Error(), "known: mooncake, nixl") {
		t.Fatalf("unknown connector error %v", err)
	}
}

type namedConnector struct{ nixlConnector }

func (namedConnector) Name() string { return "other" }

func TestWithAddsWithoutChangingTheOriginal(t *testing.T) {
	b := Builtin()
	r := b.With(namedConnector{})
	if !slices.Equal(r.Names(), []string{"mooncake", "nixl", "other"}) || !slices.Equal(b.Names(), []string{"mooncake", "nixl"}) {
		t.Fatalf("with: %v, builtin after: %v", r.Names(), b.Names())
	}
}
