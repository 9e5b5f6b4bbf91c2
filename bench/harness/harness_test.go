package harness

import (
	"fmt"
	"net/http"
	"net/http/httptest"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/narwhal-router/narwhal/bench/loadgen"
	"github.com/narwhal-router/narwhal/config"
)

// testRouterConfig is the default configuration in front of one producer and one consumer.
func testRouterConfig() RouterConfig {
	c := DefaultRouterConfig()
	c.Listen, c.AdminListen = "127.0.0.1:18000", "127.0.0.1:18001" // testports: not bound (the config is only written and checked)
	c.Engines = []loadgen.Engine{
		{Name: "p0", Role: "prefill", URL: "http://127.0.0.1:9000", EngineID: "id-p0", KVEndpoint: "127.0.0.1:9100"},
		{Name: "d0", Role: "decode", URL: "http://127.0.0.1:9001", EngineID: "id-d0", KVEndpoint: "127.0.0.1:9101"},
	}
	return c
}

func TestRouterConfigIsAValidNarwhalConfiguration(t *testing.T) {
	c := testRouterConfig()
	c.MaxAttempts, c.PrefillTimeoutS, c.ExposeRoutingHeaders = 3, 0.5, true
	cfg, err := c.Write(t.TempDir() + "/router.yaml")
	if err != nil {
		t.Fatal(err)
	}
	if cfg.Recovery.MaxAttempts != 3 || cfg.Engine.PrefillTimeoutS != 0.5 || !cfg.Server.ExposeRoutingHeaders ||
		cfg.Log.AccessLog || cfg.Metrics.Statsd != nil || len(cfg.Engines) != 2 ||
		cfg.Engines[0].KV.EngineID != "id-p0" || cfg.Engines[1].KV.Endpoint != "127.0.0.1:9101" {
		t.Fatalf("%+v", cfg)
	}
}

// A traced arm's configuration turns tracing on, every request, to the sink; the default one
// leaves it off.
func TestRouterConfigTracesOnlyWhenAsked(t *testing.T) {
	c := testRouterConfig()
	off, err := c.Write(t.TempDir() + "/router.yaml")
	if err != nil {
		t.Fatal(err)
	}
	if off.Tracing.OTLPEndpoint != "" {
		t.Fatalf("tracing on by default: %+v", off.Tracing)
	}
	c.TracingEndpoint = "http://127.0.0.1:4318"
	on, err := c.Write(t.TempDir() + "/router.yaml")
	if err != nil {
		t.Fatal(err)
	}
	if on.Tracing.OTLPEndpoint != c.TracingEndpoint || on.Tracing.Protocol != "http" || on.Tracing.SampleRatio != 1 {
		t.Fatalf("traced arm: %+v", on.Tracing)
	}
}

// A configuration with flow_control carries it whole to the router; one without has the
// defaults (no tenants, one band).
func TestRouterConfigCarriesFlowControl(t *testing.T) {
	c := testRouterConfig()
	plain, err := c.Write(t.TempDir() + "/router.yaml")
	if err != nil {
		t.Fatal(err)
	}
	if len(plain.FlowControl.Tenants) != 0 || len(plain.FlowControl.Bands) != 0 {
		t.Fatalf("flow control without asking: %+v", plain.FlowControl)
	}
	fc := config.Default().FlowControl
	fc.Bands = []config.FlowBand{{Name: "interactive", TTFTTargetS: 1}, {Name: "batch", Sheddable: true}}
	fc.DefaultBand = "interactive"
	fc.Tenants = []config.Tenant{{Name: "quiet", APIKeys: []string{"k-quiet"}, Weight: 2, Bands: []string{"batch"}}}
	c.FlowControl = &fc
	got, err := c.Write(t.TempDir() + "/router.yaml")
	if err != nil {
		t.Fatal(err)
	}
	g := got.FlowControl
	if len(g.Bands) != 2 || g.Bands[0].TTFTTargetS != 1 || !g.Bands[1].Sheddable || g.DefaultBand != "interactive" ||
		g.BandHeader != fc.BandHeader || len(g.Tenants) != 1 || g.Tenants[0].APIKeys[0] != "k-quiet" || g.Tenants[0].Weight != 2 {
		t.Fatalf("flow_control: %+v", g)
	}
}

func TestReadUsageOfThisProcess(t *testing.T) {
	u, err := ReadUsage(os.Getpid())
	if err != nil {
		t.Fatal(err)
	}
	if u.RSSKiB <= 0 || u.Threads <= 0 {
		t.Fatalf("%+v", u)
	}
	if ClockTicks() <= 0 {
		t.Fatal("clock ticks")
	}
}

func TestCounterSumsMatchingSeries(t *testing.T) {
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		fmt.Fprint(w, `# HELP narwhal_requests requests
narwhal_requests{endpoint="chat",outcome="success",status="200"} 7
narwhal_requests{endpoint="chat",outcome="error",status="502"} 2
narwhal_requests_total 99
narwhal_retries{reason="timeout"} 3
`)
	}))
	defer srv.Close()
	r := &Router{Admin: strings.TrimPrefix(srv.URL, "http://"), client: srv.Client()}
	all, err := r.Counter("narwhal_requests", "")
	if err != nil || all[""] != 9 {
		t.Fatalf("%v %v", all, err)
	}
	by, _ := r.Counter("narwhal_requests", "outcome", `status="502"`)
	if len(by) != 1 || by["error"] != 2 {
		t.Fatalf("%v", by)
	}
}

func TestProcessDeathIsReportedWithItsLog(t *testing.T) {
	dir := t.TempDir()
	p, err := Start(Spec{Name: "sh", Path: "/bin/sh", Args: []string{"-c", "echo boom >&2; exit 3"}, Log: dir + "/sh.log"})
	if err != nil {
		t.Fatal(err)
	}
	select {
	case <-p.Exited():
	case <-time.After(5 * time.Second):
		t.Fatal("no exit")
	}
	err = p.Died()
	if err == nil || !strings.Contains(err.Error(), "boom") || !strings.Contains(err.Error(), "exit status 3") {
		t.Fatalf("%v", err)
	}
	q, err := Start(Spec{Name: "sleep", Path: "/bin/sleep", Args: []string{"30"}, Log: dir + "/sleep.log"})
	if err != nil {
		t.Fatal(err)
	}
	q.Stop(time.Second)
	if q.Died() != nil {
		t.Fatal("a stopped process did not die unexpectedly")
	}
}

func TestFloorIsPositive(t *testing.T) {
	f, err := MeasureFloor()
	if err != nil {
		t.Fatal(err)
	}
	if f.Syscall <= 0 || f.WriteRead <= 0 || f.Relay <= 0 {
		t.Fatalf("%+v", f)
	}
}

// Each proxy arm's CPU is its own process's, and merging windows keeps the baseline router's
// usage like the others': CPU summed, RSS at its peak.
func TestMergeAndProxyUsageCoverTheBaseline(t *testing.T) {
	w := func(router, baseline time.Duration, rss int64) Window {
		return Window{Router: Usage{CPU: router, RSSKiB: rss}, Peer: Usage{CPU: time.Millisecond},
			Baseline: Usage{CPU: baseline, RSSKiB: 2 * rss}}
	}
	m := Merge(w(10*time.Millisecond, 20*time.Millisecond, 100), w(30*time.Millisecond, 40*time.Millisecond, 50))
	if m.Router.CPU != 40*time.Millisecond || m.Baseline.CPU != 60*time.Millisecond || m.Router.RSSKiB != 100 || m.Baseline.RSSKiB != 200 {
		t.Fatalf("%+v", m)
	}
	for arm, want := range map[loadgen.Arm]time.Duration{
		loadgen.Routed: 40 * time.Millisecond, loadgen.Peer: 2 * time.Millisecond, loadgen.Baseline: 60 * time.Millisecond, loadgen.Direct: 0,
	} {
		if got := m.ProxyUsage(arm).CPU; got != want {
			t.Fatalf("%s: %s, want %s", arm, got, want)
		}
	}
}
