package config

import (
	"testing"
	"time"

	"github.com/narwhal-router/narwhal/transport/kv"
)

// provisioned is Provision for a configuration the test knows to be valid.
func provisioned(t *testing.T, c Config) Runtime {
	t.Helper()
	rt, err := Provision(c, kv.Builtin())
	if err != nil {
		t.Fatal(err)
	}
	return rt
}

// withEngines gives c the smallest valid fleet.
func withEngines(c Config) Config {
	c.Engines = []Engine{{Name: "p0", URL: "http://127.0.0.1:8100", Role: RolePrefill, KV: KV{Connector: kv.NIXL}},
		{Name: "d0", URL: "https://10.0.0.2", Role: RoleDecode, Models: []string{"m"}}}
	return c
}

func TestProvisionReadsDurationsAndDerivedValuesOnce(t *testing.T) {
	c := withEngines(Default())
	c.Engine.DecodeReadTimeoutS = 2.5
	c.Handoff.OnMissing = OnMissingFail
	c.Recovery.ProbeIntervalS = 0.2
	rt := provisioned(t, c)
	if rt.Engine.DecodeRead != 2500*time.Millisecond || rt.Engine.FirstToken != c.Engine.FirstTokenTimeoutS.Duration() {
		t.Fatalf("engine timings %+v", rt.Engine)
	}
	if !rt.Request.FailOnMissing || rt.Request.MaxHandoffAge != c.Handoff.MaxAgeS.Duration() ||
		rt.Request.QueueTimeout != 5*time.Second || rt.Request.MaxAttempts != c.Recovery.MaxAttempts {
		t.Fatalf("request runtime %+v", rt.Request)
	}
	// A sub-second probe interval still tells clients to come back in a whole second.
	if rt.Request.RetryAfter != "1" {
		t.Fatalf("Retry-After %q, want 1", rt.Request.RetryAfter)
	}
	c.Recovery.ProbeIntervalS = 7
	if got := provisioned(t, c).Request.RetryAfter; got != "7" {
		t.Fatalf("Retry-After %q, want 7", got)
	}
	if rt.Server.ShutdownGrace != c.Server.ShutdownGraceS.Duration() || rt.Server.MaxBodyBytes != c.Server.MaxBodyBytes {
		t.Fatalf("server runtime %+v", rt.Server)
	}
}

// Every engine comes out resolved: its dial address (the scheme's port when the URL has none),
// its connector from the registry, its KV side; and the cluster's derived names are filled in.
func TestProvisionResolvesEnginesAndDerivedNames(t *testing.T) {
	c := withEngines(Default())
	c.Engine.MaxHeldBytes = 1234
	c.Server.MaxResponseBytes = 777
	rt := provisioned(t, c)
	p, d := rt.Engines[0], rt.Engines[1]
	if p.Addr != "127.0.0.1:8100" || p.TLS || p.Base != "http://127.0.0.1:8100" || p.Connector.Name() != kv.NIXL ||
		p.KV.Host != "127.0.0.1" || p.KV.Connector != kv.NIXL || len(p.KV.TransferModes) != 1 {
		t.Fatalf("producer spec %+v", p)
	}
	if d.Addr != "10.0.0.2:443" || !d.TLS || d.Models[0] != "m" {
		t.Fatalf("consumer spec %+v", d)
	}
	if rt.Engine.MaxHeldBytes != 1234 || rt.Engine.MaxResponseBytes != 777 {
		t.Fatalf("engine timings %+v", rt.Engine)
	}
	if rt.Cluster.Advertise != c.Cluster.Bind || rt.Cluster.Node != c.Cluster.Bind {
		t.Fatalf("cluster names %+v", rt.Cluster)
	}
	if rt.Admin.Listen != c.Server.AdminListen || rt.Log.AccessLogFlush != 200*time.Millisecond {
		t.Fatalf("admin %+v, log %+v", rt.Admin, rt.Log)
	}
}

// A connector the registry does not hold is refused by Provision; the same name is accepted
// once the registry holds it.
func TestProvisionChecksConnectorsAgainstTheRegistryInUse(t *testing.T) {
	c := withEngines(Default())
	c.Engines[1].KV.Connector = "other"
	if _, err := Provision(c, kv.Builtin()); err == nil || err.Error() != `engines[1].kv.connector: "other" is not allowed (allowed: nixl)` {
		t.Fatalf("unknown connector: %v", err)
	}
	rt, err := Provision(c, kv.Builtin().With(otherConnector{}))
	if err != nil || rt.Engines[1].Connector.Name() != "other" {
		t.Fatalf("registered connector: %v", err)
	}
}

type otherConnector struct{}

func (otherConnector) Name() string                                   { return "other" }
func (otherConnector) Plan(kv.Attempt) kv.Transfer                    { return kv.Transfer{Prefill: []byte(`{}`)} }
func (otherConnector) Validate(*kv.Descriptor, kv.Pair) *kv.Rejection { return nil }
