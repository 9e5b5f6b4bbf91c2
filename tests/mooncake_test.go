package tests

import (
	"context"
	"net"
	"strconv"
	"testing"
	"time"

	"github.com/narwhal-router/narwhal/bench/sim"
	"github.com/narwhal-router/narwhal/config"
	"github.com/narwhal-router/narwhal/transport/kv"
	"github.com/narwhal-router/narwhal/transport/preflight"
)

// startMooncake runs one producer and one consumer on vLLM's MooncakeConnector: the producer's
// kv.endpoint (the simulator's side-channel listener) is its bootstrap server.
func startMooncake(t *testing.T, engine sim.Options, tweak func(*config.Config)) *harness {
	t.Helper()
	return start(t, mooncakeSetup(engine, tweak))
}

// mooncakeSetup is startMooncake's fleet, for a test that adjusts it further.
func mooncakeSetup(engine sim.Options, tweak func(*config.Config)) setup {
	engine.Tokens = 4
	return setup{prefill: 1, decode: 1, engine: engine, admit: tweak != nil,
		config: func(c *config.Config) {
			for i := range c.Engines {
				c.Engines[i].KV.Connector = kv.Mooncake
			}
			c.Recovery.EjectAfter = 2
			if tweak != nil {
				tweak(c)
			}
		}}
}

// A Mooncake fleet serves streamed and whole answers: the router learned the producer's engine
// id from its bootstrap server, sent both legs at once with one transfer id and the rank
// header, and the consumer really pulled the blocks the producer registered under that id.
func TestMooncakeFleetPullsTheProducersBlocks(t *testing.T) {
	h := startMooncake(t, sim.Options{}, nil)
	p0, d0 := h.simEngine("p0"), h.simEngine("d0")
	readBefore := p0.Stats().BlocksRead // the join checks' transfers

	streamed := h.send("/v1/completions", completion("a mooncake prompt", true))
	expectDone(t, streamed)
	whole := h.send("/v1/completions", completion("another mooncake prompt", false))
	if whole.status != 200 {
		t.Fatalf("non-streamed answer %d: %s", whole.status, whole.body)
	}
	for _, r := range []result{streamed, whole} {
		l := h.expectAccess(r.id, 200, 1, "")
		if ttft, fb := num(l["ttft_s"]), num(l["first_byte_s"]); ttft <= 0 || ttft > fb {
			t.Fatalf("ttft_s %v, first_byte_s %v: want 0 < ttft_s <= first_byte_s for concurrent legs", ttft, fb)
		}
	}

	prefills, decodes := h.legs("prefill"), h.legs("decode")
	if len(prefills) != 2 || len(decodes) != 2 {
		t.Fatalf("%d prefill and %d decode legs, want 2 each", len(prefills), len(decodes))
	}
	for i := range prefills {
		p, d := prefills[i], decodes[i]
		tid := strconv.Quote("xfer-" + p.Get("X-Request-Id"))
		pp, dp := transferParams(t, p), transferParams(t, d)
		if pp["transfer_id"] != tid || pp["do_remote_decode"] != "true" {
			t.Fatalf("prefill leg carried %v, want transfer id %s", pp, tid)
		}
		if dp["transfer_id"] != tid || dp["do_remote_prefill"] != "true" ||
			dp["remote_engine_id"] != strconv.Quote(p0.EngineID()) ||
			dp["remote_bootstrap_addr"] != strconv.Quote("http://"+p0.KVEndpoint()) {
			t.Fatalf("decode leg carried %v, want transfer id %s, engine %s, bootstrap http://%s", dp, tid, p0.EngineID(), p0.KVEndpoint())
		}
		if p.Get("X-data-parallel-rank") != "0" || d.Get("X-data-parallel-rank") != "0" {
			t.Fatalf("rank headers %q and %q, want 0 on both legs", p.Get("X-data-parallel-rank"), d.Get("X-data-parallel-rank"))
		}
	}
	ps, ds := p0.Stats(), d0.Stats()
	// Preflight's transfer runs the same plan: a bootstrap query, both legs, a real pull.
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	rt := h.srv.Runtime()
	if res := preflight.Run(ctx, rt.Engines, rt.Config); !res.OK() || len(res.Pairs) != 1 {
		t.Fatalf("preflight through the mooncake connector:\n%s", res.Matrix())
	}
	if loads := d0.Stats().KVLoads; loads != ds.KVLoads+1 {
		t.Fatalf("preflight made %d pulls, want 1", loads-ds.KVLoads)
	}
	if read := ps.BlocksRead - readBefore; ds.KVLoads != 2 || ds.KVLoadFailures != 0 || read < 2 || ds.BlocksLoaded != read {
		t.Fatalf("producer handed over %d blocks, consumer loaded %d in %d loads (%d failed): want both transfers' blocks pulled",
			read, ds.BlocksLoaded, ds.KVLoads, ds.KVLoadFailures)
	}
}

// A producer whose bootstrap server names another engine than its pinned kv.engine_id, or does
// not answer at all, fails the request cleanly before either leg starts, is blamed for it, and
// is ejected after recovery.eject_after such failures; the consumer is never touched.
func TestMooncakeBadBootstrapFailsCleanlyAndEjectsTheProducer(t *testing.T) {
	for _, tc := range []struct {
		name, kind string
		bend       func(*config.Engine)
	}{
		{"wrong engine id", "invalid_descriptor", func(e *config.Engine) { e.KV.EngineID = "not-this-producer" }},
		{"unreachable bootstrap", "unreachable", func(e *config.Engine) { e.KV.Endpoint = deadAddress(t) }},
	} {
		t.Run(tc.name, func(t *testing.T) {
			h := startMooncake(t, sim.Options{}, func(c *config.Config) {
				c.Recovery.ProbeIntervalS, c.Recovery.ProbeMaxIntervalS = 30, 30 // stays out once ejected
				tc.bend(&c.Engines[0])
			})
			r := h.send("/v1/completions", completion("hi", true))
			if r.status != 502 {
				t.Fatalf("status %d, want 502: %s", r.status, r.body)
			}
			l := h.accessLine(r.id)
			if str(l["error_kind"]) != tc.kind || str(l["error_engine"]) != "p0" {
				t.Fatalf("access log %v, want error_kind %s on p0", l, tc.kind)
			}
			h.failUntilEjected("p0", "", 0)
			if got := h.clientLegs("d0", "decode"); got != 0 {
				t.Fatalf("the consumer saw %d decode legs; a failed bootstrap must stop the attempt before either leg", got)
			}
			if s := h.engine("d0").State; s != "admitted" {
				t.Fatalf("consumer d0 is %s: the producer's bootstrap failure was blamed on it", s)
			}
		})
	}
}

// A producer that restarted while idle has new engine ids, and the router's cached bootstrap
// answer still names the old one. The first request after the restart is planned on it, and
// its consumer, as vLLM's does, waits for KV from an engine id nobody serves any more; the
// recheck the attempt started (its answer was not confirmed lately) finds the new id, ends the
// attempt at once as stale_engine_id, and the retry hands the consumer the new id. The client
// gets its answer with one retry, well before engine.first_token_timeout_s, and neither breaker
// counts anything: a restart is no engine's failure.
func TestMooncakeProducerRestartedWhileIdleCostsOneRetryNotA504(t *testing.T) {
	s := mooncakeSetup(sim.Options{KVLease: 5 * time.Second}, func(c *config.Config) {
		c.Engines[0].KV.EngineID = "" // not pinned: the bootstrap server's word
		c.Engine.FirstTokenTimeoutS = 2
	})
	// Every attempt's answer is rechecked: the test need not sit idle for the default bound.
	s.connectors = kv.Builtin().With(kv.NewMooncake(kv.RecheckAfter(0)))
	h := start(t, s)
	p0, d0 := h.simEngine("p0"), h.simEngine("d0")
	expectDone(t, h.send("/v1/completions", completion("before the restart", true)))
	// That request's recheck confirmed the answer: the producer now restarts while idle.
	rechecks := func(result string) float64 {
		return h.metric(`narwhal_kv_bootstrap_rechecks_total{producer="p0",result="` + result + `"}`)
	}
	eventually(t, 5*time.Second, func() bool { return rechecks(kv.RecheckConfirmed) >= 1 },
		func() string { return "no recheck of p0's bootstrap answer was confirmed" })
	old := p0.EngineID()
	p0.Restart()
	decodesBefore := len(h.legs("decode"))

	r := h.send("/v1/completions", completion("after the restart", true))
	out := expectDone(t, r)
	if out.tokens != 4 {
		t.Fatalf("%d token events, want the 4 of one answer: %q", out.tokens, out.text)
	}
	l := h.expectAccess(r.id, 200, 2, "stale_engine_id") // the retry, and why
	if fb := num(l["first_byte_s"]); fb >= 2 {
		t.Fatalf("first byte after %vs: the stale attempt waited for engine.first_token_timeout_s", fb)
	}
	// The retry's decode carried the restarted producer's id. The stale attempt's decode, if it
	// reached the consumer before the recheck ended it, carried the old one.
	decodes, ids := h.legs("decode")[decodesBefore:], map[string]int{}
	for _, d := range decodes {
		id := transferParams(t, d)["remote_engine_id"]
		if d.Get("X-Request-Id") == str(l["backend_request_id"]) {
			id = "answered with " + id
		}
		ids[id]++
	}
	answered := "answered with " + strconv.Quote(p0.EngineID())
	if len(decodes) > 2 || ids[answered] != 1 || ids[strconv.Quote(old)] != len(decodes)-1 || p0.EngineID() == old {
		t.Fatalf("decode legs %v, want the answer from the restarted producer's id %s, after at most one with the old id %s",
			ids, p0.EngineID(), old)
	}
	eventually(t, 5*time.Second, func() bool {
		return rechecks(kv.RecheckChanged) == 1 && h.metric(`narwhal_retries_total{reason="stale_engine_id"}`) == 1
	}, func() string { return h.scrape() })
	for _, name := range []string{"p0", "d0"} {
		if e := h.engine(name); e.State != "admitted" || e.Streak != 0 {
			t.Fatalf("engine %s is %s with a failure streak of %d: the producer's restart was counted against it", name, e.State, e.Streak)
		}
	}
	if f := d0.Stats().KVLoadFailures; f != 0 {
		t.Fatalf("the consumer failed %d KV loads: the stale attempt was not ended", f)
	}
}

// deadAddress is a loopback host:port where nothing listens.
func deadAddress(t *testing.T) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := ln.Addr().String()
	ln.Close()
	return addr
}
