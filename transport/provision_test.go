package transport_test

import (
	"net"
	"os"
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
		"kv.connector: \"other\" is not allowed (allowed: mooncake, nixl)", "kv.endpoint"} {
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

// Every source's engine passes the same checks: no credentials (never repeated), a bounded
// host, nothing at the router's own listeners (configured or bound, under every name of this
// host), no allowed_ports covering them; a registrant's KV pin is held to the endpoint policy,
// the operator's only to the rules every pin has.
func TestProvisionerRefusesWhatLoopsOrEscapesThePolicy(t *testing.T) {
	p := transport.NewProvisioner(kv.Builtin(), []int{8000, 8001})
	p.Listening(&net.TCPAddr{IP: net.IPv4(127, 0, 0, 1), Port: 40123}) // a listener configured on port 0
	host, _ := os.Hostname()
	base := config.Engine{Name: "e", URL: "http://10.0.0.7:8100", Role: config.RolePrefill}
	with := func(f func(*config.Engine)) config.Engine { e := base; f(&e); return e }
	cases := []struct {
		name    string
		e       config.Engine
		sources []string // where it is refused; every other source of all takes it
		want    string
	}{
		{"client port on loopback", with(func(e *config.Engine) { e.URL = "http://127.0.0.1:8000" }), all, "own listener"},
		{"admin port as localhost", with(func(e *config.Engine) { e.URL = "http://localhost:8001" }), all, "own listener"},
		{"unspecified address", with(func(e *config.Engine) { e.URL = "http://0.0.0.0:8000" }), all, "own listener"},
		{"this host's name", with(func(e *config.Engine) { e.URL = "http://" + host + ":8001" }), all, "own listener"},
		{"bound port", with(func(e *config.Engine) { e.URL = "http://[::1]:40123" }), all, "own listener"},
		{"router port on another host", with(func(e *config.Engine) { e.URL = "http://10.0.0.7:8000" }), nil, ""},
		{"credentials", with(func(e *config.Engine) { e.URL = "http://admin:s3cretpw@10.0.0.7:8100" }), all, "credentials"},
		{"credentials in a bad URL", with(func(e *config.Engine) { e.URL = "http://admin:s3cret%zz@10.0.0.7:8100" }), all, "credentials"},
		{"10 KB host", with(func(e *config.Engine) { e.URL = "http://" + strings.Repeat("h", 10<<10) + ":8100" }), all, "at most 253"},
		{"allowed ports cover the admin port", with(func(e *config.Engine) { e.KV.AllowedPorts = []string{"7000-9000"} }), all, "kv.allowed_ports"},
		{"allowed ports cover a bound port", with(func(e *config.Engine) { e.KV.AllowedPorts = []string{"40000-41000"} }), all, "kv.allowed_ports"},
		{"pin at the admin listener", with(func(e *config.Engine) { e.KV.Endpoint = "127.0.0.1:8001" }), all, "kv.endpoint"},
		{"pin at metadata", with(func(e *config.Engine) { e.KV.Endpoint = "169.254.169.254:80" }), all, "metadata"},
		{"pin on its own host and port range", with(func(e *config.Engine) { e.KV.Endpoint = "10.0.0.7:5600" }), nil, ""},
		{"pin on another host", with(func(e *config.Engine) { e.KV.Endpoint = "10.0.0.99:5600" }), registrants, "own host"},
		{"pin outside allowed ports", with(func(e *config.Engine) { e.KV.Endpoint = "10.0.0.7:22" }), registrants, "allowed_ports"},
		{"kv events at the client listener", with(func(e *config.Engine) { e.KVEvents.Endpoint = "tcp://127.0.0.1:8000" }), all, "kv_events.endpoint"},
	}
	for _, tc := range cases {
		for _, src := range all {
			_, err := p.From(src, tc.e)
			refused := slices.Contains(tc.sources, src)
			switch {
			case refused && (err == nil || !strings.Contains(err.Error(), tc.want)):
				t.Errorf("%s from %s: %v; want refused naming %q", tc.name, src, err, tc.want)
			case !refused && err != nil:
				t.Errorf("%s from %s refused: %v", tc.name, src, err)
			case err != nil && (strings.Contains(err.Error(), "s3cret") || len(err.Error()) > 1024):
				t.Errorf("%s from %s: the refusal repeats the credentials or the whole value: %.200s", tc.name, src, err)
			}
		}
	}
}

var (
	registrants = []string{"kubernetes", "etcd /narwhal/engines/", "dns decode.svc"}
	all         = append([]string{transport.SourceFile, transport.SourceAdmin}, registrants...)
)
