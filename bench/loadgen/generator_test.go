package loadgen

import (
	"context"
	"net"
	"net/http/httptest"
	"testing"
	"time"

	"github.com/narwhal-router/narwhal/bench/peer"
	"github.com/narwhal-router/narwhal/bench/sim"
	"github.com/narwhal-router/narwhal/config"
	"github.com/narwhal-router/narwhal/node"
	"github.com/narwhal-router/narwhal/transport/kv"
)

// rig starts an in-process fleet and router and a generator aimed at them.
func rig(t *testing.T, engine sim.Options, adjust func(*config.Config)) *Generator {
	t.Helper()
	fleet, err := sim.StartFleet(sim.FleetOptions{Prefill: 2, Decode: 2, Engine: engine})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { fleet.Close() })
	cfg := config.Default()
	cfg.Log.AccessLog = false
	var engines []Engine
	for _, e := range fleet.Engines {
		cfg.Engines = append(cfg.Engines, config.Engine{Name: e.Name(), URL: e.URL(), Role: config.Role(e.Role()), Models: e.Models(),
			KV: config.KV{Connector: kv.NIXL, EngineID: e.EngineID(), Endpoint: e.KVEndpoint(), TransferModes: []string{"pull"}}})
		engines = append(engines, Engine{Name: e.Name(), Role: string(e.Role()), URL: e.URL(), EngineID: e.EngineID(), KVEndpoint: e.KVEndpoint()})
	}
	if adjust != nil {
		adjust(&cfg)
	}
	rt, err := node.Provision(cfg, kv.Builtin())
	if err != nil {
		t.Fatal(err)
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	adminLn, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	srv, err := node.Start(rt, node.Options{Listener: ln, AdminListener: adminLn})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		srv.Shutdown(ctx)
	})
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if err := srv.WaitJoined(ctx); err != nil {
		t.Fatal(err)
	}
	peers := make([]peer.Engine, len(engines))
	for i, e := range engines {
		peers[i] = peer.Engine{Role: e.Role, URL: e.URL}
	}
	px, err := peer.New(peers)
	if err != nil {
		t.Fatal(err)
	}
	ps := httptest.NewServer(px)
	t.Cleanup(ps.Close)
	// The baseline arm is only an address: the same router stands in for a second build here.
	g, err := NewGenerator(Setup{Router: srv.Addr(), Peer: ps.Listener.Addr().String(), Baseline: srv.Addr(),
		Engines: engines, Model: sim.DefaultModel, Timeouts: cfg.Engine})
	if err != nil {
		t.Fatal(err)
	}
	return g
}

func run(t *testing.T, g *Generator, p Phase) Result {
	t.Helper()
	res, err := g.Run(p, func(Event) {})
	if err != nil {
		t.Fatal(err)
	}
	if res.ViolationCount() > 0 {
		t.Fatalf("%s: violations %v", p.Name, res.Violations)
	}
	return res
}

func TestBothArmsCompleteEveryRequest(t *testing.T) {
	g := rig(t, sim.Options{TTFT: 2 * time.Millisecond, ITL: time.Millisecond, Tokens: 8}, nil)
	for _, arm := range []Arm{Direct, Routed} {
		for _, p := range []Phase{
			{Name: "closed", Arm: arm, Mode: Closed, Concurrency: 4, Duration: 200 * time.Millisecond, MaxTokens: 5, PromptWords: 20},
			{Name: "open", Arm: arm, Mode: Open, Rate: 100, Duration: 200 * time.Millisecond, MaxTokens: 5, PromptWords: 20},
		} {
			res := run(t, g, p)
			if res.Sent == 0 || res.OK != res.Sent || res.Tokens != int64(5*res.Sent) {
				t.Fatalf("%s %s: sent %d ok %d tokens %d errors %v", arm, p.Name, res.Sent, res.OK, res.Tokens, res.Errors)
			}
			if len(res.FirstByte) != res.Sent || len(res.TTFT) != res.Sent || len(res.Total) != res.Sent {
				t.Fatalf("%s %s: samples %d/%d/%d for %d", arm, p.Name, len(res.TTFT), len(res.FirstByte), len(res.Total), res.Sent)
			}
			if p.Mode == Open && len(res.Lag) != res.Sent {
				t.Fatalf("open loop records every start lag")
			}
		}
	}
}

// The peer proxy's and the baseline router's streams pass the same one-outcome check as the
// router's.
func TestPeerAndBaselineArmsCompleteEveryRequest(t *testing.T) {
	g := rig(t, sim.Options{TTFT: 2 * time.Millisecond, ITL: time.Millisecond, Tokens: 8}, nil)
	for _, arm := range []Arm{Peer, Baseline} {
		res := run(t, g, Phase{Name: string(arm), Arm: arm, Mode: Closed, Concurrency: 4, Duration: 200 * time.Millisecond, MaxTokens: 5, PromptWords: 20})
		if res.Sent == 0 || res.OK != res.Sent || res.Tokens != int64(5*res.Sent) || len(res.FirstByte) != res.Sent {
			t.Fatalf("%s: sent %d ok %d tokens %d first bytes %d errors %v", arm, res.Sent, res.OK, res.Tokens, len(res.FirstByte), res.Errors)
		}
	}
	// A rig without a second router fails the arm's every request, loudly, rather than
	// sending it to the router under test.
	g.setup.Baseline = ""
	res := run(t, g, Phase{Name: "no-baseline", Arm: Baseline, Mode: Closed, Concurrency: 2, Duration: 50 * time.Millisecond, MaxTokens: 5, PromptWords: 20})
	if res.Sent == 0 || res.OK != 0 || res.Errors["no baseline arm in this rig"] != res.Sent {
		t.Fatalf("sent %d ok %d errors %v", res.Sent, res.OK, res.Errors)
	}
}

func TestHoldReportsEveryStreamStreaming(t *testing.T) {
	g := rig(t, sim.Options{ITL: 50 * time.Millisecond, Tokens: 6}, nil)
	var got []Event
	res, err := g.Run(Phase{Name: "hold", Arm: Routed, Mode: Hold, Streams: 20, Rate: 200, MaxTokens: 6, PromptWords: 8},
		func(e Event) { got = append(got, e) })
	if err != nil {
		t.Fatal(err)
	}
	if len(got) != 1 || got[0].Streaming != 20 || res.Streaming != 20 || res.OK != 20 {
		t.Fatalf("events %+v, result streaming %d ok %d errors %v violations %v", got, res.Streaming, res.OK, res.Errors, res.Violations)
	}
}

func TestFaultsEndInOneOutcomeAndAreCleared(t *testing.T) {
	g := rig(t, sim.Options{TTFT: time.Millisecond, ITL: time.Millisecond, Tokens: 8}, func(c *config.Config) {
		c.Recovery.MaxAttempts = 3
		c.Recovery.RetryBudget.MinPerS = 1000
		c.Engine.FirstTokenTimeoutS, c.Engine.DecodeReadTimeoutS, c.Engine.PrefillTimeoutS = 0.2, 0.2, 0.2
	})
	plan := &FaultPlan{Rate: 0.5, Kinds: []FaultKind{
		{Spec: "prefill.status=500", Role: "prefill", Weight: 1},
		{Spec: "decode.close_after=0", Role: "decode", Weight: 1},
		{Spec: "decode.close_after=2", Role: "decode", Weight: 1, AfterCommit: true},
	}}
	res := run(t, g, Phase{Name: "faults", Arm: Routed, Mode: Closed, Concurrency: 4, Duration: 300 * time.Millisecond,
		MaxTokens: 5, PromptWords: 8, Faults: plan})
	if res.Faults == nil || res.Faults.Failed > 0 {
		t.Fatalf("fault tally %+v", res.Faults)
	}
	injected, consumed := 0, 0
	for k, v := range res.Faults.Injected {
		injected += v
		consumed += res.Faults.Consumed[k]
		if c := res.Faults.Consumed[k]; c < 0 || c > v {
			t.Fatalf("%s: consumed %d of %d", k, c, v)
		}
	}
	if injected == 0 || consumed == 0 {
		t.Fatalf("no fault injected or applied: %+v", res.Faults)
	}
	if res.OK+res.ErrorCount() != res.Sent {
		t.Fatalf("outcomes %d + %d for %d requests", res.OK, res.ErrorCount(), res.Sent)
	}
	// Nothing is left for the next phase.
	clean := run(t, g, Phase{Name: "after", Arm: Direct, Mode: Closed, Concurrency: 2, Duration: 100 * time.Millisecond, MaxTokens: 5, PromptWords: 8})
	if clean.OK != clean.Sent {
		t.Fatalf("faults leaked into the next phase: %v", clean.Errors)
	}
}

func TestHoldHangsUpAfterHoldFor(t *testing.T) {
	g := rig(t, sim.Options{ITL: 20 * time.Millisecond, Tokens: 500}, nil)
	start := time.Now()
	res := run(t, g, Phase{Name: "hold", Arm: Routed, Mode: Hold, Streams: 10, Rate: 200, HoldFor: 100 * time.Millisecond,
		MaxTokens: 500, PromptWords: 8})
	if res.Released != 10 || res.OK != 0 || res.ErrorCount() != 0 || res.Streaming != 10 {
		t.Fatalf("released %d ok %d errors %v streaming %d", res.Released, res.OK, res.Errors, res.Streaming)
	}
	if el := time.Since(start); el > 3*time.Second {
		t.Fatalf("hanging up took %s: the streams ran on", el)
	}
}
