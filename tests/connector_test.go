package tests

import (
	"context"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/goccy/go-json"

	"github.com/narwhal-router/narwhal/bench/sim"
	"github.com/narwhal-router/narwhal/config"
	"github.com/narwhal-router/narwhal/transport/kv"
	"github.com/narwhal-router/narwhal/transport/preflight"
)

// concurrentConnector is a connector of the test suite's own, shaped like Mooncake: it plans
// both legs of an attempt before either starts (a transfer id, which is the attempt's backend
// request ID, and the producer's bootstrap address from the pair), so the router runs prefill
// and decode at once. The simulator treats its decode parameters as a decode that computes the
// prompt itself, which is all the wire needs to prove.
type concurrentConnector struct{}

const concurrentName = "test-concurrent"

func (concurrentConnector) Name() string { return concurrentName }

func (concurrentConnector) Plan(a kv.Attempt) kv.Transfer {
	id := strconv.Quote(a.BackendRequestID)
	return kv.Transfer{
		Prefill: []byte(`{"do_remote_decode":true,"do_remote_prefill":false,"transfer_id":` + id + `}`),
		Decode: []byte(`{"do_remote_prefill":false,"transfer_id":` + id +
			`,"remote_bootstrap_addr":` + strconv.Quote(a.Pair.Producer.Endpoint) + `}`),
	}
}

func (concurrentConnector) Validate(d *kv.Descriptor, pair kv.Pair) *kv.Rejection {
	if id, ok := d.StringMember("transfer_id"); !ok || id == "" {
		return kv.Reject(kv.ReasonMissingEngineIdentity, "transfer_id is absent")
	}
	if addr, _ := d.StringMember("remote_bootstrap_addr"); addr != pair.Producer.Endpoint {
		return kv.Reject(kv.ReasonEndpointMismatch, "bootstrap address %q is not producer %s's %q", addr, pair.Producer.Engine, pair.Producer.Endpoint)
	}
	return nil
}

// startWithConnector runs a fleet of one producer and decoders consumers whose engines all use
// the test connector, registered the way a composition root adds a connector of its own: in the
// registry the configuration is provisioned with.
func startWithConnector(t *testing.T, decoders int, tweak func(*config.Config)) *harness {
	t.Helper()
	return start(t, setup{prefill: 1, decode: decoders, engine: sim.Options{Tokens: 4},
		connectors: kv.Builtin().With(concurrentConnector{}),
		config: func(cfg *config.Config) {
			for i := range cfg.Engines {
				cfg.Engines[i].KV.Connector = concurrentName
			}
			if tweak != nil {
				tweak(cfg)
			}
		}})
}

// transferParams is a recorded leg's kv_transfer_params.
func transferParams(t *testing.T, leg sim.RecordedRequest) map[string]string {
	t.Helper()
	var body struct {
		KV map[string]any `json:"kv_transfer_params"`
	}
	if err := json.Unmarshal(leg.Body, &body); err != nil {
		t.Fatal(err)
	}
	out := map[string]string{}
	for k, v := range body.KV {
		b, _ := json.Marshal(v)
		out[k] = string(b)
	}
	return out
}

// A connector that plans both legs gets the pair and the backend request ID, and the attempt
// runner starts the decode together with the prefill: the decode leg reaches its engine while
// the (slowed) prefill has not answered, both carry the planned parameters, and the client gets
// a whole stream.
func TestConcurrentConnectorRunsBothLegsAtOnce(t *testing.T) {
	h := startWithConnector(t, 1, nil)
	const prefillDelay = 800 * time.Millisecond
	r := h.send("/v1/completions", completion("hi @sim:prefill.slow_headers="+strconv.Itoa(int(prefillDelay/time.Millisecond)), true))
	expectDone(t, r)
	if r.elapsed < prefillDelay {
		t.Fatalf("answered in %v, before the prefill (%v): the attempt did not wait for it", r.elapsed, prefillDelay)
	}

	prefills, decodes := h.legs("prefill"), h.legs("decode")
	if len(prefills) != 1 || len(decodes) != 1 {
		t.Fatalf("%d prefill and %d decode legs, want one each", len(prefills), len(decodes))
	}
	p, d := prefills[0], decodes[0]
	if gap := d.At.Sub(p.At); gap > prefillDelay/2 {
		t.Fatalf("the decode leg arrived %v after the prefill leg, want it started together (prefill takes %v)", gap, prefillDelay)
	}
	backend := p.Get("X-Request-Id")
	if backend == "" || d.Get("X-Request-Id") != backend {
		t.Fatalf("backend request IDs %q and %q, want one for both legs", backend, d.Get("X-Request-Id"))
	}
	pp, dp := transferParams(t, p), transferParams(t, d)
	if pp["transfer_id"] != strconv.Quote(backend) || pp["do_remote_decode"] != "true" {
		t.Fatalf("prefill leg carried %v, want the planned transfer id %q", pp, backend)
	}
	producer := h.simEngine("p0").KVEndpoint()
	if dp["transfer_id"] != strconv.Quote(backend) || dp["remote_bootstrap_addr"] != strconv.Quote(producer) {
		t.Fatalf("decode leg carried %v, want transfer id %q and the producer's bootstrap address %s", dp, backend, producer)
	}
	h.expectAccess(r.id, 200, 1, "")
}

// When the prefill of a concurrent attempt fails, the client gets the prefill's fault and the
// decode leg, which would wait for a KV cache that never comes, is cancelled at its engine.
func TestConcurrentConnectorPrefillFailureCancelsTheDecode(t *testing.T) {
	h := startWithConnector(t, 1, nil)
	r := h.send("/v1/completions", completion("hi @sim:prefill.status=500 @sim:decode.slow_first_token=5000", true))
	expectError(t, r, 502, "engine_status", "engine failed (500)")
	h.expectAccess(r.id, 502, 1, "engine_status")
	h.expectAborted("d0", 1, 3*time.Second)
}

// And the other way round: a failed decode cancels its prefill (whose blocks nobody would
// read), and the client hears the decode's fault without waiting for the prefill.
func TestConcurrentConnectorDecodeFailureCancelsThePrefill(t *testing.T) {
	h := startWithConnector(t, 1, nil)
	const prefillDelay = 5 * time.Second
	// The decode fails 300 ms in, so that the prefill leg, started at the same moment, has
	// reached its engine: a decode that fails at once can cancel the prefill before its request
	// is written, and then the producer has nothing to abort (checked below as well).
	r := h.send("/v1/completions", completion("hi @sim:decode.slow_headers=300 @sim:decode.status=500 @sim:prefill.slow_headers="+
		strconv.Itoa(int(prefillDelay/time.Millisecond)), true))
	expectError(t, r, 502, "engine_status", "engine failed (500)")
	if r.elapsed >= prefillDelay {
		t.Fatalf("answered after %v: the attempt waited for the prefill it should have cancelled", r.elapsed)
	}
	h.expectAccess(r.id, 502, 1, "engine_status")
	if len(h.legs("prefill")) == 0 {
		t.Log("the prefill leg was cancelled before it reached its engine: nothing to abort there")
		h.quiesced()
		return
	}
	h.expectAborted("p0", 1, 3*time.Second)
}

// One attempt runner serves client requests, preflight and probes alike, so an engine behind a
// registered two-leg connector is checked and readmitted through that connector: preflight's
// transfers pass, and a consumer ejected by its failures comes back after a probe whose decode
// leg carried the connector's planned parameters (the probe of another runner, which knew only
// NIXL's descriptors, stayed inconclusive for ever).
func TestRegisteredConnectorPassesPreflightAndIsReadmittedByAProbe(t *testing.T) {
	h := startWithConnector(t, 2, func(c *config.Config) {
		c.Recovery.EjectAfter = 1
		c.Recovery.ProbeIntervalS, c.Recovery.ProbeMaxIntervalS = 0.1, 0.2
	})
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	rt := h.srv.Runtime()
	res := preflight.Run(ctx, rt.Engines, rt.Config)
	if !res.OK() || len(res.Pairs) != 2 {
		t.Fatalf("preflight through the registered connector:\n%s", res.Matrix())
	}
	for _, engine := range []string{"d0", "d1"} {
		if leg := probeLeg(t, h, engine); leg == nil {
			t.Fatalf("preflight ran no decode leg on %s", engine)
		} else if dp := transferParams(t, *leg); dp["transfer_id"] == "" {
			t.Fatalf("preflight's decode leg on %s carried %v, not the connector's plan", engine, dp)
		}
	}

	h.failUntilEjected("d0", "decode.status=500", 1)
	probesBefore := len(probeLegs(h, "d0"))
	h.waitProbes("d0", "success", 1, 10*time.Second)
	if e := h.waitState("d0", "admitted", 5*time.Second); e.LastProbe == nil || e.LastProbe.Result != "success" || e.LastProbe.Partner != "p0" {
		t.Fatalf("readmitted without a successful probe partnered with p0: %+v", e)
	}
	legs := probeLegs(h, "d0")
	if len(legs) <= probesBefore {
		t.Fatal("no probe reached d0")
	}
	dp := transferParams(t, legs[len(legs)-1])
	if dp["transfer_id"] != strconv.Quote(legs[len(legs)-1].Get("X-Request-Id")) ||
		dp["remote_bootstrap_addr"] != strconv.Quote(h.simEngine("p0").KVEndpoint()) {
		t.Fatalf("the probe's decode leg carried %v, want the connector's plan", dp)
	}
	expectDone(t, h.send("/v1/completions", completion("after readmission", true)))
}

// probeLegs are the decode legs engine served for probes and preflight, oldest first.
func probeLegs(h *harness, engine string) []sim.RecordedRequest {
	var out []sim.RecordedRequest
	for _, r := range h.simEngine(engine).Requests() {
		if r.Leg == "decode" && strings.HasPrefix(r.Get("X-Request-Id"), "probe-") {
			out = append(out, r)
		}
	}
	return out
}

func probeLeg(t *testing.T, h *harness, engine string) *sim.RecordedRequest {
	t.Helper()
	legs := probeLegs(h, engine)
	if len(legs) == 0 {
		return nil
	}
	return &legs[0]
}
