package fault_test

// The fault table vectors of testdata/contract (faults.json: "kinds" and "durations"), run
// against transport/fault. python/tests/test_contract.py runs the same file against the Python
// client, so the two cannot drift. The file's scripted engine answers ("cases") are run in
// transport, where the engine client turns them into faults.

import (
	"encoding/json"
	"testing"

	"github.com/narwhal-router/narwhal/config"
	"github.com/narwhal-router/narwhal/transport/fault"
	"github.com/narwhal-router/narwhal/transport/internal/contract"
)

func kindNamed(t *testing.T, name string) fault.Kind {
	t.Helper()
	for _, k := range fault.Kinds() {
		if k.String() == name {
			return k
		}
	}
	t.Fatalf("no fault kind %q", name)
	return 0
}

// bodySources names the table's Body column as the vectors do.
var bodySources = map[string]fault.BodySource{
	"router_envelope": fault.RouterEnvelope,
	"engine_body":     fault.EngineBody,
	"engine_redacted": fault.EngineRedacted,
}

func TestContractFaultKinds(t *testing.T) {
	var doc struct {
		Durations [][2]any
		Kinds     []struct {
			Kind                string
			Family              string
			EngineStatus        int `json:"engine_status"`
			Status              int `json:"status"`
			Type                string
			Retriable           bool   `json:"retriable"`
			CountsAgainstEngine bool   `json:"counts_against_engine"`
			Body                string `json:"body"`
		}
	}
	contract.Load(t, "faults.json", &doc)
	if len(doc.Kinds) == 0 || len(doc.Durations) == 0 {
		t.Fatalf("faults.json has %d kinds and %d durations", len(doc.Kinds), len(doc.Durations))
	}
	covered := map[string]bool{}
	for _, k := range doc.Kinds {
		covered[k.Kind] = true
	}
	for _, k := range fault.Kinds() { // the vectors are the Python client's copy of the table too
		if name := k.Policy().Name; !covered[name] {
			t.Errorf("fault kind %s has no row in faults.json", name)
		}
	}
	for _, k := range doc.Kinds {
		f := &fault.Fault{Kind: kindNamed(t, k.Kind), Status: k.EngineStatus, Detail: "d"}
		body, ok := bodySources[k.Body]
		if !ok {
			t.Errorf("%s: body %q is none of the Body column's", k.Kind, k.Body)
		}
		var env struct{ Error struct{ Type, Code string } }
		if err := json.Unmarshal(fault.ClientBody(f, true), &env); err != nil {
			t.Fatal(err)
		}
		if f.ClientStatus() != k.Status || env.Error.Type != k.Type || env.Error.Code != k.Kind || f.Retriable() != k.Retriable ||
			f.CountsAgainstEngine() != k.CountsAgainstEngine || f.Kind.Policy().Body != body {
			t.Errorf("%s (engine status %d): status %d type %s code %s retriable %v counts %v body %d; vectors: %+v",
				k.Kind, k.EngineStatus, f.ClientStatus(), env.Error.Type, env.Error.Code, f.Retriable(), f.CountsAgainstEngine(), f.Kind.Policy().Body, k)
		}
	}
	// Each kind's family is the Python client's exception class for it. The families follow
	// the table: the timeouts are exactly the 504s, the cancelled legs exactly the router-side
	// ends; one kind has one family whatever the engine's status.
	families := map[string]string{}
	for _, k := range doc.Kinds {
		f := &fault.Fault{Kind: kindNamed(t, k.Kind), Status: k.EngineStatus}
		switch {
		case !map[string]bool{"timeout": true, "connection": true, "engine": true, "handoff": true, "cancelled": true}[k.Family]:
			t.Errorf("%s: family %q is none of timeout, connection, engine, handoff, cancelled", k.Kind, k.Family)
		case (k.Family == "timeout") != (f.ClientStatus() == 504):
			t.Errorf("%s: family %q, client status %d: the timeout family is exactly the 504s", k.Kind, k.Family, f.ClientStatus())
		case (k.Family == "cancelled") != f.RouterSide():
			t.Errorf("%s: family %q, router side %v: the cancelled family is exactly the router-side ends", k.Kind, k.Family, f.RouterSide())
		case families[k.Kind] != "" && families[k.Kind] != k.Family:
			t.Errorf("%s: families %q and %q in two rows", k.Kind, families[k.Kind], k.Family)
		}
		families[k.Kind] = k.Family
	}
	for _, d := range doc.Durations {
		if got := config.Seconds(d[0].(float64)).Duration().String(); got != d[1].(string) {
			t.Errorf("%v s is written %q, vectors say %q", d[0], got, d[1])
		}
	}
}
