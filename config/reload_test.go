package config

import (
	"slices"
	"strings"
	"testing"
)

// A reload names every key it changes, and refuses, by name, the ones a running router cannot
// change; the engine list and the run-time settings pass.
func TestChangesNamesEveryKeyAndRefusesTheFixedOnes(t *testing.T) {
	base := withEngines(Default())
	cur := base.Clone()

	next := base.Clone()
	next.Engines = append(next.Engines, Engine{Name: "d1", URL: "http://10.0.0.3:8000", Role: RoleDecode, Models: []string{"m"}})
	next.Log.Level = "debug"
	next.Recovery.MaxAttempts = 3
	next.Disaggregation.Policy = DisaggNever
	next.Placement.Policy = PlaceP2C
	next.Server.APIKeys = []string{"k1"}
	next.EngineContract = &EngineContract{Model: "m"}
	changed, refused := Changes(cur, next)
	for _, want := range []string{"engines", "log.level", "recovery.max_attempts", "disaggregation.policy",
		"placement.policy", "server.api_keys", "engine_contract"} {
		if !slices.Contains(changed, want) {
			t.Errorf("changes %v lack %s", changed, want)
		}
	}
	if len(refused) != 0 {
		t.Fatalf("refused %v, want nothing refused", refused)
	}

	fixed := base.Clone()
	fixed.Server.Listen = ":9000"
	fixed.Engine.FirstTokenTimeoutS = 3
	fixed.Cluster.GossipIntervalS = 1
	fixed.Placement.PrefixIndexBlocks = 10
	fixed.Log.Level = "warn"
	changed, refused = Changes(cur, fixed)
	want := []string{"server.listen", "engine.first_token_timeout_s", "placement.prefix_index_blocks", "cluster.gossip_interval_s"}
	for _, w := range want {
		if !slices.Contains(refused, w) {
			t.Errorf("refused %v lacks %s", refused, w)
		}
	}
	if slices.Contains(refused, "log.level") || !slices.Contains(changed, "log.level") {
		t.Errorf("log.level: changed %v, refused %v", changed, refused)
	}

	if changed, _ := Changes(cur, base.Clone()); len(changed) != 0 {
		t.Fatalf("the same configuration changes %v", changed)
	}
}

// The file's engines are handed out as copies: the file source reports them as the file had
// them, whatever the caller does with its Config afterwards.
func TestFileEnginesAreACopy(t *testing.T) {
	c := withEngines(Default())
	kept := c.Clone()
	c.Engines[1].Models[0] = "changed"
	c.Engines[0].Name = "changed"
	got := kept.FileEngines()
	if got[0].Name != "p0" || got[1].Models[0] != "m" {
		t.Fatalf("file engines %+v", got)
	}
	got[1].Models[0] = "mine"
	if kept.FileEngines()[1].Models[0] != "m" {
		t.Fatal("FileEngines hands out the configuration's own slices")
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
	if e.Name != "d4" || e.MaxInflight != 8 || e.KV.Connector != DefaultConnector || !slices.Equal(e.KV.TransferModes, []string{"pull"}) || e.KV.EngineID != "x" {
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
