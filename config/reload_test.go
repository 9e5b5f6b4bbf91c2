package config

import (
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/narwhal-router/narwhal/transport/kv"
)

// A reload names every key it changes, and refuses, by name, the ones a running router cannot
// change; the engine list and the run-time settings pass.
func TestChangesNamesEveryKeyAndRefusesTheFixedOnes(t *testing.T) {
	base := withEngines(Default())
	cur := provisioned(t, base)

	next := base.clone()
	next.Engines = append(next.Engines, Engine{Name: "d1", URL: "http://10.0.0.3:8000", Role: RoleDecode, Models: []string{"m"}})
	next.Log.Level = "debug"
	next.Recovery.MaxAttempts = 3
	next.Disaggregation.Policy = DisaggNever
	next.Placement.Policy = PlaceP2C
	next.Server.APIKeys = []string{"k1"}
	next.EngineContract = &EngineContract{Model: "m"}
	changed, refused := Changes(cur, provisioned(t, next))
	for _, want := range []string{"engines", "log.level", "recovery.max_attempts", "disaggregation.policy",
		"placement.policy", "server.api_keys", "engine_contract"} {
		if !slices.Contains(changed, want) {
			t.Errorf("changes %v lack %s", changed, want)
		}
	}
	if len(refused) != 0 {
		t.Fatalf("refused %v, want nothing refused", refused)
	}

	fixed := base.clone()
	fixed.Server.Listen = ":9000"
	fixed.Engine.FirstTokenTimeoutS = 3
	fixed.Cluster.GossipIntervalS = 1
	fixed.Placement.PrefixIndexBlocks = 10
	fixed.Log.Level = "warn"
	changed, refused = Changes(cur, provisioned(t, fixed))
	want := []string{"server.listen", "engine.first_token_timeout_s", "placement.prefix_index_blocks", "cluster.gossip_interval_s"}
	for _, w := range want {
		if !slices.Contains(refused, w) {
			t.Errorf("refused %v lacks %s", refused, w)
		}
	}
	if slices.Contains(refused, "log.level") || !slices.Contains(changed, "log.level") {
		t.Errorf("log.level: changed %v, refused %v", changed, refused)
	}

	if changed, _ := Changes(cur, provisioned(t, base.clone())); len(changed) != 0 {
		t.Fatalf("the same configuration changes %v", changed)
	}
}

// A keys file whose keys changed is a change of the client keys even when the file's name did
// not change.
func TestChangesSeesANewKeysFile(t *testing.T) {
	path := filepath.Join(t.TempDir(), "keys")
	os.WriteFile(path, []byte("a\n"), 0o600)
	c := withEngines(Default())
	c.Server.APIKeysFile = path
	cur := provisioned(t, c)
	os.WriteFile(path, []byte("a\nb\n"), 0o600)
	changed, refused := Changes(cur, provisioned(t, c))
	if !slices.Equal(changed, []string{"server.api_keys_file"}) || len(refused) != 0 {
		t.Fatalf("changed %v refused %v", changed, refused)
	}
}

// The runtime keeps its own copy of the file's engines: the file source reports them as they
// were provisioned, whatever the caller does with its Config afterwards.
func TestFileEnginesAreACopy(t *testing.T) {
	c := withEngines(Default())
	rt := provisioned(t, c)
	c.Engines[1].Models[0] = "changed"
	c.Engines[0].Name = "changed"
	got := rt.FileEngines()
	if got[0].Name != "p0" || got[1].Models[0] != "m" || rt.Engines[0].Source != SourceFile {
		t.Fatalf("file engines %+v (source %q)", got, rt.Engines[0].Source)
	}
	got[1].Models[0] = "mine"
	if rt.FileEngines()[1].Models[0] != "m" {
		t.Fatal("FileEngines hands out the runtime's own slices")
	}
}

// One engine handed over at run time is parsed as strictly as the file's list, gets the same
// defaults, and never reads the environment.
func TestParseEngine(t *testing.T) {
	e, err := ParseEngine([]byte(`{"name":"d4","url":"http://10.0.0.24:8000","role":"decode","max_inflight":8,
		"models":["m"],"kv":{"engine_id":"x"}}`))
	if err != nil {
		t.Fatal(err)
	}
	if e.Name != "d4" || e.MaxInflight != 8 || e.KV.Connector != kv.Default || !slices.Equal(e.KV.TransferModes, []string{"pull"}) || e.KV.EngineID != "x" {
		t.Fatalf("parsed %+v", e)
	}
	for _, tc := range []struct{ body, want string }{
		{`{"name":"d4","url":"http://a:1","role":"decode","maxinflight":3}`, `unknown key "maxinflight"`},
		{`{"name":"d4","url":"http://a:1","role":"decode","max_inflight":"lots"}`, `max_inflight: "lots" is not allowed; want a whole number`},
		{`{"name":"d4","url":"http://a:1","role":"decode","api_key":"${SECRET}"}`, "api_key: environment references"},
		{`["d4"]`, "is not an engine"},
		{``, "empty"},
		{`{"name":`, "not valid JSON or YAML"},
	} {
		if _, err := ParseEngine([]byte(tc.body)); err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%s: %v, want an error containing %q", tc.body, err, tc.want)
		}
	}
}

// ProvisionEngine holds an engine on its own to the file's rules, and names every problem.
func TestProvisionEngineValidates(t *testing.T) {
	_, err := ProvisionEngine(Engine{Name: "bad name", URL: "http://a:1/v1", Role: "decoder",
		KV: KV{Connector: "tcp", Endpoint: "x"}}, kv.Builtin())
	for _, want := range []string{"engine bad name", "name: \"bad name\" is not a usable name", "url:", "role: \"decoder\"",
		"kv.connector: \"tcp\" is not allowed", "kv.endpoint"} {
		if err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("error %v lacks %q", err, want)
		}
	}
	spec, err := ProvisionEngine(Engine{Name: "d4", URL: "http://10.0.0.24:8000", Role: RoleDecode}, kv.Builtin())
	if err != nil || spec.Addr != "10.0.0.24:8000" || spec.Connector.Name() != kv.Default {
		t.Fatalf("%+v %v", spec, err)
	}
}

func TestReloadable(t *testing.T) {
	for path, want := range map[string]bool{
		"engines": true, "log.level": true, "log.format": false, "request.deadline_s": true,
		"recovery.retry_budget.ratio": true, "placement.prefix_index_blocks": false, "placement.policy": true,
		"engine_contract": true, "engine_contract.model": true, "engine.first_token_timeout_s": false,
		"server.api_keys_file": true, "server.admin_token": false, "cluster.seeds": false, "preflight.require": false,
	} {
		if Reloadable(path) != want {
			t.Errorf("Reloadable(%q) = %v, want %v", path, !want, want)
		}
	}
}
