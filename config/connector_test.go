package config

import (
	"strings"
	"testing"

	"github.com/narwhal-router/narwhal/transport/kv"
)

// An unknown connector is a configuration error naming the key, its line and the known
// connectors, not a failure when the router starts. Parsing cannot know the registry the router
// will run with; provisioning checks against it and still names the line.
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
	_, err = Provision(cfg, kv.Builtin())
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
	if _, err := Provision(cfg, kv.Builtin()); err != nil {
		t.Fatalf("nixl rejected: %v", err)
	}
}
