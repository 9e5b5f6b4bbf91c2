package tests

import (
	"context"
	"net"
	"net/http"
	"strconv"
	"testing"
	"time"

	"github.com/goccy/go-json"

	"github.com/narwhal-router/narwhal/bench/sim"
	"github.com/narwhal-router/narwhal/config"
	"github.com/narwhal-router/narwhal/node"
	"github.com/narwhal-router/narwhal/transport/kv"
)

// concurrentConnector is a connector of the test suite's own, shaped like Mooncake: it plans
// both legs of an attempt before either starts (a transfer id, which is the attempt's backend
// request ID, and the producer's bootstrap address from the pair), so the router runs prefill
// and decode at once. The simulator treats its decode parameters as a decode that computes the
// prompt itself, which is all the wire needs to prove.
type concurrentConnector struct{}

const concurrentName = "test-concurrent"

func (concurrentConnector) Name() string { return concurrentName }

func (concurrentConnector) Plan(a kv.Attempt) kv.Plan {
	id := strconv.Quote(a.BackendRequestID)
	return kv.Plan{
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

// startWithConnector runs a 1p+1d fleet whose engines use the test connector, registered
// through node.Options the way a composition root adds a connector of its own. (The
// configuration is not passed through config.Validate, which knows only Narwhal's connectors.)
func startWithConnector(t *testing.T) *harness {
	t.Helper()
	fleet, err := sim.StartFleet(sim.FleetOptions{Prefill: 1, Decode: 1, Engine: sim.Options{Tokens: 4}})
	if err != nil {
		t.Fatal(err)
	}
	cfg := config.Default()
	cfg.Disaggregation.Policy = config.DisaggAlways // the connector's legs are the point
	cfg.Server.ShutdownGraceS = 2
	cfg.Engine.PrefillTimeoutS = 10
	cfg.Engine.FirstTokenTimeoutS = 10
	cfg.Engines = fleetEngines(fleet)
	for i := range cfg.Engines {
		cfg.Engines[i].KV.Connector = concurrentName
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	adminLn, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	access := &syncBuffer{}
	srv, err := node.Start(cfg, node.Options{Logger: testLogger(t), AccessLog: access, Listener: ln, AdminListener: adminLn,
		Connectors: kv.Builtin().With(concurrentConnector{})})
	if err != nil {
		fleet.Close()
		t.Fatal(err)
	}
	h := &harness{t: t, fleet: fleet, srv: srv, base: "http://" + srv.Addr(), admin: "http://" + srv.AdminAddr(),
		access: access, client: &http.Client{Timeout: 60 * time.Second, Transport: &http.Transport{MaxIdleConnsPerHost: 64}}}
	t.Cleanup(func() {
		if !t.Failed() {
			h.assertNoReservations()
		}
		h.client.CloseIdleConnections()
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		srv.Shutdown(ctx)
		fleet.Close()
	})
	return h
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
	h := startWithConnector(t)
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
	h := startWithConnector(t)
	r := h.send("/v1/completions", completion("hi @sim:prefill.status=500 @sim:decode.slow_first_token=5000", true))
	expectError(t, r, 502, "engine_status", "engine failed (500)")
	h.expectAccess(r.id, 502, 1, "engine_status")
	h.expectAborted("d0", 1, 3*time.Second)
}

// And the other way round: a failed decode cancels its prefill (whose blocks nobody would
// read), and the client hears the decode's fault without waiting for the prefill.
func TestConcurrentConnectorDecodeFailureCancelsThePrefill(t *testing.T) {
	h := startWithConnector(t)
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
