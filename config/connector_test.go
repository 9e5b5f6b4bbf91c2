package config

import (
	"slices"
	"strings"
	"testing"
)

// names is a connector registry of the tests' own: the names it holds.
type names []string

func (n names) Has(name string) bool { return slices.Contains(n, name) }
func (n names) Names() []string      { return slices.Sorted(slices.Values(n)) }

// builtin holds the connector Narwhal ships (transport/kv's Builtin).
var builtin = names{DefaultConnector}

// An unknown connector is a configuration error naming the key, its line and the known
// connectors, not a failure when the router starts. Parsing cannot know the registry the router
// will run with; Validate checks against it and still names the line.
func TestUnknownConnectorIsRejectedWithItsLine(t *testing.T) {
	const file = `
engines:
  - {name: p0, url: "http://127.0.0.1:8100", role: prefill}
  - name: d0
    url: "http://127.0.0.1:8200"
    role: decode
    kv: {connector: mooncake}
`
	cfg, err := Parse([]byte(file), noEnv)
	if err != nil {
		t.Fatal(err)
	}
	err = cfg.Validate(builtin)
	if err == nil {
		t.Fatal("a configuration naming an unknown connector was accepted")
	}
	want := `line 7: engines[1].kv.connector: "mooncake" is not allowed (allowed: nixl)`
	if !strings.Contains(err.Error(), want) {
		t.Fatalf("error %q, want it to contain %q", err, want)
	}
	if cfg, err = Parse([]byte(strings.Replace(file, "mooncake", "nixl", 1)), noEnv); err != nil {
		t.Fatalf("nixl rejected: %v", err)
	}
	if err := cfg.Validate(builtin); err != nil {
		t.Fatalf("nixl rejected: %v", err)
	}
	// The same name passes once the registry holds it.
	cfg, _ = Parse([]byte(file), noEnv)
	if err := cfg.Validate(names{"nixl", "mooncake"}); err != nil {
		t.Fatalf("a registered connector: %v", err)
	}
}

// A configuration built in Go names no line: the key path alone.
func TestValidateChecksConnectorsAgainstTheRegistryInUse(t *testing.T) {
	c := withEngines(Default())
	c.Engines[1].KV.Connector = "other"
	if err := c.Validate(builtin); err == nil || err.Error() != `engines[1].kv.connector: "other" is not allowed (allowed: nixl)` {
		t.Fatalf("unknown connector: %v", err)
	}
	if err := c.Validate(names{"nixl", "other"}); err != nil {
		t.Fatalf("registered connector: %v", err)
	}
}

// withEngines gives c the smallest valid fleet.
func withEngines(c Config) Config {
	c.Engines = []Engine{{Name: "p0", URL: "http://127.0.0.1:8100", Role: RolePrefill, KV: KV{Connector: DefaultConnector}},
		{Name: "d0", URL: "https://10.0.0.2", Role: RoleDecode, Models: []string{"m"}}}
	return c
}
