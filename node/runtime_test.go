package node

import (
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/narwhal-router/narwhal/config"
	"github.com/narwhal-router/narwhal/transport/discovery"
	"github.com/narwhal-router/narwhal/transport/kv"
)

// withEngines gives c the smallest valid fleet.
func withEngines(c config.Config) config.Config {
	c.Engines = []config.Engine{{Name: "p0", URL: "http://127.0.0.1:8100", Role: config.RolePrefill},
		{Name: "d0", URL: "https://10.0.0.2", Role: config.RoleDecode, Models: []string{"m"}}}
	return c
}

// Provision checks connector names against the registry it is given, naming the line; reads
// the keys file once; provisions the file's engines with their source, off the router's own
// ports; and keeps a copy of the configuration the caller cannot change.
func TestProvision(t *testing.T) {
	const file = `
engines:
  - {name: p0, url: "http://127.0.0.1:8100", role: prefill}
  - name: d0
    url: "http://127.0.0.1:8200"
    role: decode
    kv: {connector: lmcache}
`
	cfg, err := config.Parse([]byte(file), func(string) (string, bool) { return "", false })
	if err != nil {
		t.Fatal(err)
	}
	if _, err := Provision(cfg, kv.Builtin()); err == nil ||
		!strings.Contains(err.Error(), `line 7: engines[1].kv.connector: "lmcache" is not allowed (allowed: mooncake, nixl)`) {
		t.Fatalf("unknown connector: %v", err)
	}

	keys := filepath.Join(t.TempDir(), "keys")
	if err := os.WriteFile(keys, []byte("a\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	c := withEngines(config.Default())
	c.Server.APIKeys = []string{"k"}
	c.Server.APIKeysFile = keys
	rt, err := Provision(c, kv.Builtin())
	if err != nil {
		t.Fatal(err)
	}
	if !slices.Equal(rt.APIKeys, []string{"k", "a"}) {
		t.Fatalf("keys %v", rt.APIKeys)
	}
	if len(rt.Engines) != 2 || rt.Engines[0].Source != discovery.SourceFile || rt.Engines[1].Addr != "10.0.0.2:443" ||
		!slices.Equal(rt.Engines[0].KV.ReservedPorts, []int{8000, 8001}) {
		t.Fatalf("engines %+v", rt.Engines)
	}
	c.Engines[1].Models[0] = "changed"
	if rt.Config.Engines[1].Models[0] != "m" {
		t.Fatal("the runtime shares the caller's configuration")
	}
}

// A keys file whose keys changed is a change of the client keys even when the file's name did
// not change; the same file with the same keys changes nothing.
func TestChangesSeesANewKeysFile(t *testing.T) {
	path := filepath.Join(t.TempDir(), "keys")
	if err := os.WriteFile(path, []byte("a\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	c := withEngines(config.Default())
	c.Server.APIKeysFile = path
	cur, err := Provision(c, kv.Builtin())
	if err != nil {
		t.Fatal(err)
	}
	same, err := Provision(c, kv.Builtin())
	if err != nil {
		t.Fatal(err)
	}
	if changed, _ := changes(cur, same); len(changed) != 0 {
		t.Fatalf("the same file changes %v", changed)
	}
	if err := os.WriteFile(path, []byte("a\nb\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	next, err := Provision(c, kv.Builtin())
	if err != nil {
		t.Fatal(err)
	}
	changed, refused := changes(cur, next)
	if !slices.Equal(changed, []string{"server.api_keys_file"}) || len(refused) != 0 {
		t.Fatalf("changed %v refused %v", changed, refused)
	}
	c.Server.Listen = ":9000" // testports: not bound (a listener change the reload refuses)
	next, err = Provision(c, kv.Builtin())
	if err != nil {
		t.Fatal(err)
	}
	if _, refused := changes(cur, next); !slices.Equal(refused, []string{"server.listen"}) {
		t.Fatalf("refused %v", refused)
	}
}
