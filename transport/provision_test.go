package transport_test

import (
	"slices"
	"strings"
	"testing"

	"github.com/narwhal-router/narwhal/config"
	"github.com/narwhal-router/narwhal/transport"
	"github.com/narwhal-router/narwhal/transport/kv"
)

// The file's default connector is the registry's.
func TestDefaultConnectorIsTheRegistrys(t *testing.T) {
	if config.DefaultConnector != kv.Default {
		t.Fatalf("config.DefaultConnector %q, kv.Default %q", config.DefaultConnector, kv.Default)
	}
}

// Every engine comes out resolved: its dial address (the scheme's port when the URL has none),
// its connector from the registry, its KV side with its allowed ports and the router's own.
func TestProvisionerResolvesEngines(t *testing.T) {
	p := transport.NewProvisioner(kv.Builtin(), []int{8000, 8001})
	specs, err := p.Engines([]config.Engine{
		{Name: "p0", URL: "http://127.0.0.1:8100", Role: config.RolePrefill, KV: config.KV{AllowedPorts: []string{"7000-7010", "7100"}}},
		{Name: "d0", URL: "https://10.0.0.2", Role: config.RoleDecode, Models: []string{"m"}},
	}, "file")
	if err != nil {
		t.Fatal(err)
	}
	pr, d := specs[0], specs[1]
	if pr.Addr != "127.0.0.1:8100" || pr.TLS || pr.Base != "http://127.0.0.1:8100" || pr.Connector.Name() != kv.NIXL || pr.Source != "file" ||
		pr.KV.Host != "127.0.0.1" || pr.KV.Connector != kv.NIXL || !slices.Equal(pr.KV.TransferModes, []string{"pull"}) {
		t.Fatalf("producer spec %+v", pr)
	}
	if !slices.Equal(pr.KV.AllowedPorts, []kv.PortRange{{Lo: 7000, Hi: 7010}, {Lo: 7100, Hi: 7100}}) || !slices.Equal(pr.KV.ReservedPorts, []int{8000, 8001}) {
		t.Fatalf("producer ports %+v, reserved %v", pr.KV.AllowedPorts, pr.KV.ReservedPorts)
	}
	if d.Addr != "10.0.0.2:443" || !d.TLS || d.Models[0] != "m" {
		t.Fatalf("consumer spec %+v", d)
	}
}

// One engine is held to the file's rules, every problem named; a connector the registry does not
// hold is refused, and accepted once the registry holds it.
func TestProvisionerChecksEnginesAgainstTheRegistryInUse(t *testing.T) {
	_, err := transport.NewProvisioner(kv.Builtin(), nil).Engine(config.Engine{Name: "bad name", URL: "http://a:1/v1", Role: "decoder",
		KV: config.KV{Connector: "other", Endpoint: "x"}})
	for _, want := range []string{"engine bad name", "name: \"bad name\" is not a usable name", "url:", "role: \"decoder\"",
		"kv.connector: \"other\" is not allowed (allowed: nixl)", "kv.endpoint"} {
		if err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("error %v lacks %q", err, want)
		}
	}
	e := config.Engine{Name: "d4", URL: "http://10.0.0.24:8000", Role: config.RoleDecode, KV: config.KV{Connector: "other"}}
	spec, err := transport.NewProvisioner(kv.Builtin().With(otherConnector{}), nil).Engine(e)
	if err != nil || spec.Addr != "10.0.0.24:8000" || spec.Connector.Name() != "other" {
		t.Fatalf("%+v %v", spec, err)
	}
	if _, err := (transport.Provisioner{}).Engine(e); err == nil {
		t.Fatal("the zero provisioner knows a connector")
	}
}

// Two specs of one engine are the same whatever their source; any other difference makes a new
// engine.
func TestSameEngine(t *testing.T) {
	p := transport.NewProvisioner(kv.Builtin(), []int{8000})
	e := config.Engine{Name: "d0", URL: "http://10.0.0.1:8000", Role: config.RoleDecode}
	a, _ := p.Engines([]config.Engine{e}, "file")
	b, _ := p.Engines([]config.Engine{e}, "admin")
	e.MaxInflight = 4
	c, _ := p.Engines([]config.Engine{e}, "file")
	if !transport.SameEngine(a[0], b[0]) || transport.SameEngine(a[0], c[0]) {
		t.Fatalf("same %v, changed %v", transport.SameEngine(a[0], b[0]), transport.SameEngine(a[0], c[0]))
	}
}

type otherConnector struct{}

func (otherConnector) Name() string                                   { return "other" }
func (otherConnector) Plan(kv.Attempt) kv.Transfer                    { return kv.Transfer{Prefill: []byte(`{}`)} }
func (otherConnector) Validate(*kv.Descriptor, kv.Pair) *kv.Rejection { return nil }
