package tests

import (
	"encoding/json"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/narwhal-router/narwhal/bench/sim"
	"github.com/narwhal-router/narwhal/config"
)

// pinContract configures the engine contract the simulator satisfies, so readmission runs
// lifecycle validation and a real inference probe.
func pinContract(cfg *config.Config) {
	cfg.EngineContract = &config.EngineContract{Model: "sim-model", Version: "0.14.1", Connector: "nixl", MaxModelLen: 4096}
}

const shortPrompt = `{"model":"sim-model","prompt":"x","max_tokens":2}`

// failOn sends requests until the engine has served n decode legs (each failing with the
// injected fault), checking the breaker after each: admitted with the streak so far, then
// ejected exactly at the n-th.
func TestEjectionAfterExactlyNStreamFailures(t *testing.T) {
	const ejectAfter = 3
	h := start(t, setup{prefill: 1, decode: 2, engine: sim.Options{Tokens: 2}, config: func(c *config.Config) {
		pinContract(c)
		c.Recovery.EjectAfter = ejectAfter
		c.Recovery.ProbeIntervalS, c.Recovery.ProbeMaxIntervalS = 30, 30 // no probe during the test
		c.Engine.FirstTokenTimeoutS = 0.3
	}})
	d0 := h.fleet.Engine("d0")
	if err := d0.InjectFault("decode.hang_first_token", ejectAfter); err != nil {
		t.Fatal(err)
	}
	for seen := int64(0); seen < ejectAfter; {
		resp, body := h.post("/v1/completions", shortPrompt)
		n := d0.Stats().DecodeRequests
		if n == seen { // the request went to d1
			if resp.StatusCode != 200 {
				t.Fatalf("request on the healthy engine failed: %d %s", resp.StatusCode, body)
			}
			continue
		}
		seen = n
		if resp.StatusCode != 504 || !strings.Contains(string(body), "first_token_timeout") {
			t.Fatalf("failure %d on d0: status %d %s", n, resp.StatusCode, body)
		}
		if n < ejectAfter {
			eventually(t, 2*time.Second, func() bool { e := h.engine("d0"); return e.Streak == int(n) },
				func() string { return fmt.Sprintf("streak after %d failures: %+v", n, h.engine("d0")) })
			if e := h.engine("d0"); e.State != "admitted" {
				t.Fatalf("ejected after %d failures, want %d: %+v", n, ejectAfter, e)
			}
		}
	}
	h.waitState("d0", "ejected", 2*time.Second)

	before := d0.Stats().DecodeRequests
	for i := 0; i < 10; i++ {
		if resp, body := h.post("/v1/completions", shortPrompt); resp.StatusCode != 200 {
			t.Fatalf("status %d: %s", resp.StatusCode, body)
		}
	}
	if after := d0.Stats().DecodeRequests; after != before {
		t.Fatalf("an ejected engine got %d decode legs", after-before)
	}
}

func TestSuccessResetsTheStreakAndClientErrorsNeverCount(t *testing.T) {
	h := start(t, setup{prefill: 1, decode: 1, engine: sim.Options{Tokens: 2}, config: func(c *config.Config) {
		c.Recovery.EjectAfter = 2
		c.Recovery.ProbeIntervalS, c.Recovery.ProbeMaxIntervalS = 30, 30
	}})
	steps := []struct {
		prompt string
		status int
		streak int
	}{
		{"@sim:decode.status=500", 502, 1},
		{"fine", 200, 0},
		{"@sim:decode.status=500", 502, 1},
		{"@sim:decode.status=400", 400, 1}, // the client's problem
		{"@sim:decode.status=429", 503, 1}, // load, not failure
		{"@sim:decode.status=503", 503, 1},
	}
	for i, s := range steps {
		resp, body := h.post("/v1/completions", fmt.Sprintf(`{"model":"sim-model","prompt":%q,"max_tokens":2}`, s.prompt))
		if resp.StatusCode != s.status {
			t.Fatalf("step %d (%s): status %d, want %d: %s", i, s.prompt, resp.StatusCode, s.status, body)
		}
		want := s.streak
		eventually(t, 2*time.Second, func() bool { return h.engine("d0").Streak == want },
			func() string {
				return fmt.Sprintf("step %d (%s): %+v, want streak %d", i, s.prompt, h.engine("d0"), want)
			})
	}
	if e := h.engine("d0"); e.State != "admitted" {
		t.Fatalf("state %s", e.State)
	}
}

func TestReadmissionOnlyAfterAGoodProbe(t *testing.T) {
	h := start(t, setup{prefill: 1, decode: 2, engine: sim.Options{Tokens: 2}, config: func(c *config.Config) {
		pinContract(c)
		c.Recovery.EjectAfter = 1
		c.Recovery.ProbeIntervalS, c.Recovery.ProbeMaxIntervalS = 0.1, 0.4
	}})
	d0 := h.fleet.Engine("d0")
	h.failUntilEjected("d0", "decode.status=500", 0) // until cleared
	// Probes run and fail: the engine stays out, the probe interval backs off.
	h.waitProbes("d0", "failure", 3, 5*time.Second)
	if e := h.engine("d0"); e.State == "admitted" {
		t.Fatalf("readmitted after failed probes: %+v", e)
	}
	if n := h.clientLegs("d0", "decode"); n != 1 {
		t.Fatalf("%d client requests reached d0, want only the one that ejected it", n)
	}

	d0.ClearFaults()
	e := h.waitState("d0", "admitted", 5*time.Second)
	if e.LastProbe == nil || e.LastProbe.Result != "success" || e.Streak != 0 {
		t.Fatalf("readmitted without a good probe: %+v", e)
	}
	// Traffic flows to it again.
	eventually(t, 5*time.Second, func() bool {
		h.post("/v1/completions", shortPrompt)
		return h.clientLegs("d0", "decode") > 1
	}, func() string { return "no client request reached the readmitted engine" })
}

func TestInconclusiveProbeLeavesTheEngineEjected(t *testing.T) {
	h := start(t, setup{prefill: 1, decode: 2, engine: sim.Options{Tokens: 2}, config: func(c *config.Config) {
		pinContract(c)
		c.Recovery.EjectAfter = 1
		c.Recovery.ProbeIntervalS, c.Recovery.ProbeMaxIntervalS = 0.1, 0.1
	}})
	p0 := h.fleet.Engine("p0")
	h.failUntilEjected("d0", "decode.status=500", 1)
	p0.InjectFault("prefill.status=500", 0) // the partner cannot make a handoff
	decodes := h.fleet.Engine("d0").Stats().DecodeRequests
	// Several inconclusive probes in a row, each one seen: the engine stays out.
	h.waitProbes("d0", "inconclusive", 4, 5*time.Second)
	e := h.engine("d0")
	if e.State == "admitted" || e.LastProbe.Result != "inconclusive" || !strings.Contains(e.LastProbe.Reason, "p0") {
		t.Fatalf("after inconclusive probes: %+v", e)
	}
	if n := h.probeCount("d0", "success") + h.probeCount("d0", "failure"); n != 0 {
		t.Fatalf("%v conclusive probes while the partner could not make a handoff", n)
	}
	if st := h.fleet.Engine("d0").Stats(); st.DecodeRequests != decodes {
		t.Fatalf("the ejected consumer ran %d decodes with no handoff to load", st.DecodeRequests-decodes)
	}
	p0.ClearFaults()
	h.waitState("d0", "admitted", 5*time.Second)
}

func TestCrossedDecodeProbeUsesTheOriginalProducer(t *testing.T) {
	h := start(t, setup{prefill: 2, decode: 2, engine: sim.Options{Tokens: 2}, config: func(c *config.Config) {
		pinContract(c)
		c.Recovery.EjectAfter = 1
		c.Recovery.ProbeIntervalS, c.Recovery.ProbeMaxIntervalS = 0.2, 0.2
	}})
	d0 := h.fleet.Engine("d0")
	d0.InjectFault("decode.close_after=0", 1)
	var failed string
	for i := 0; d0.Stats().DecodeRequests == 0; i++ {
		failed = fmt.Sprintf("crossed-%d", i)
		h.post("/v1/completions", shortPrompt, "X-Request-Id", failed)
	}
	producer, _ := h.accessLine(failed)["producer"].(string)
	if producer == "" {
		t.Fatal("no failed request on d0 in the access log")
	}
	other := map[string]string{"p0": "p1", "p1": "p0"}[producer]
	for _, p := range h.fleet.ByRole(sim.RolePrefill) {
		p.ResetRecorded()
	}
	e := h.waitState("d0", "admitted", 5*time.Second)
	if e.LastProbe == nil || e.LastProbe.Partner != producer {
		t.Fatalf("probe partner = %+v, want %s", e.LastProbe, producer)
	}
	probePrefills := func(name string) int {
		n := 0
		for _, r := range h.fleet.Engine(name).Requests() {
			if r.Leg == "prefill" && strings.HasPrefix(r.Get("X-Request-Id"), "probe-") {
				n++
			}
		}
		return n
	}
	if probePrefills(producer) == 0 || probePrefills(other) != 0 {
		t.Fatalf("probe prefills: original producer %s %d, other %s %d", producer, probePrefills(producer), other, probePrefills(other))
	}
}

func TestRestartedEngineWithANewIdentityFailsLifecycleValidation(t *testing.T) {
	h := start(t, setup{prefill: 2, decode: 1, engine: sim.Options{Tokens: 2}, config: func(c *config.Config) {
		pinContract(c)
		c.Recovery.EjectAfter = 1
		c.Recovery.ProbeIntervalS, c.Recovery.ProbeMaxIntervalS = 0.1, 0.2
	}})
	p1 := h.fleet.Engine("p1")
	p1.Restart() // a new engine_id: its pinned identity no longer matches
	h.failUntilEjected("p1", "", 0)
	eventually(t, 5*time.Second, func() bool {
		e := h.engine("p1")
		return e.LastProbe != nil && e.LastProbe.Result == "failure"
	}, func() string { return fmt.Sprintf("%+v", h.engine("p1")) })
	e := h.engine("p1")
	if e.State == "admitted" || !strings.Contains(e.LastProbe.Reason, "missing_engine_identity") {
		t.Fatalf("restarted producer: %+v", e)
	}
}

// recovery.readmission: health is the development fleets' opt-in: a successful /health check
// readmits, and no inference runs.
func TestHealthCheckReadmitsWhenTheFleetOptsIn(t *testing.T) {
	h := start(t, setup{prefill: 1, decode: 2, config: func(c *config.Config) {
		c.Recovery.Readmission = config.ReadmissionHealth
		c.Recovery.EjectAfter = 1
		c.Recovery.ProbeIntervalS, c.Recovery.ProbeMaxIntervalS = 0.1, 0.1
	}})
	d0 := h.fleet.Engine("d0")
	h.failUntilEjected("d0", "decode.status=500", 1)
	d0.SetDead(true)
	eventually(t, 3*time.Second, func() bool {
		e := h.engine("d0")
		return e.LastProbe != nil && e.LastProbe.Result == "failure" && strings.Contains(e.LastProbe.Reason, "health")
	}, func() string { return fmt.Sprintf("%+v", h.engine("d0")) })
	decodes := d0.Stats().DecodeRequests
	d0.SetDead(false)
	e := h.waitState("d0", "admitted", 3*time.Second)
	if e.LastProbe.Reason != "health check passed" || e.LastProbe.Mode != "health" || e.Readmission != "health" {
		t.Fatalf("%+v", e)
	}
	if d0.Stats().DecodeRequests != decodes {
		t.Fatal("a development fleet's readmission ran an inference")
	}
}

func TestWholeWavePolicyWhenEveryDecodeEngineIsEjected(t *testing.T) {
	h := start(t, setup{prefill: 1, decode: 2, engine: sim.Options{Tokens: 2}, config: func(c *config.Config) {
		pinContract(c)
		c.Recovery.EjectAfter = 1
		c.Recovery.ProbeIntervalS, c.Recovery.ProbeMaxIntervalS = 0.2, 5
	}})
	for _, d := range h.fleet.ByRole(sim.RoleDecode) {
		d.InjectFault("decode.status=500", 0)
	}
	for i := 0; i < 20 && (h.engine("d0").State == "admitted" || h.engine("d1").State == "admitted"); i++ {
		h.post("/v1/completions", shortPrompt)
	}
	// The wave restarts both engine actors together and probes them at once.
	eventually(t, 3*time.Second, func() bool { return h.engine("d0").Restarts > 0 && h.engine("d1").Restarts > 0 },
		func() string { return fmt.Sprintf("no wave restart: %+v %+v", h.engine("d0"), h.engine("d1")) })

	// Meanwhile requests fail fast with 503 and Retry-After instead of queueing.
	began := time.Now()
	resp, body := h.post("/v1/completions", shortPrompt)
	if resp.StatusCode != 503 || resp.Header.Get("Retry-After") == "" || !strings.Contains(string(body), "no_engine") {
		t.Fatalf("during the wave: %d %v %s", resp.StatusCode, resp.Header, body)
	}
	if d := time.Since(began); d > 500*time.Millisecond {
		t.Fatalf("503 took %s", d)
	}

	for _, d := range h.fleet.ByRole(sim.RoleDecode) {
		d.ClearFaults()
	}
	h.waitState("d0", "admitted", 10*time.Second)
	h.waitState("d1", "admitted", 10*time.Second)
	if resp, body := h.post("/v1/completions", shortPrompt); resp.StatusCode != 200 {
		t.Fatalf("after the wave healed: %d %s", resp.StatusCode, body)
	}
}

func TestAdminEjectAndReadmit(t *testing.T) {
	h := start(t, setup{prefill: 1, decode: 2, config: func(c *config.Config) {
		c.Recovery.ProbeIntervalS, c.Recovery.ProbeMaxIntervalS = 30, 30
	}})
	if code, body := h.adminDo("POST", "/engines/d1/eject"); code != 200 || !strings.Contains(string(body), `"ejected"`) {
		t.Fatalf("eject: %d %s", code, body)
	}
	code, body := h.adminDo("GET", "/engines")
	var list []map[string]any
	if err := json.Unmarshal(body, &list); err != nil || code != 200 {
		t.Fatalf("GET /engines: %d %s", code, body)
	}
	for _, e := range list {
		for _, k := range []string{"name", "role", "state", "streak", "reservations", "quarantine_until", "ejected_at", "next_probe", "last_probe"} {
			if _, ok := e[k]; !ok {
				t.Fatalf("engine %v has no %s", e["name"], k)
			}
		}
		if e["name"] == "d1" && e["state"] != "ejected" {
			t.Fatalf("d1 = %v", e)
		}
	}
	if code, body := h.adminDo("POST", "/engines/d1/readmit?force=true"); code != 200 || !strings.Contains(string(body), `"admitted"`) {
		t.Fatalf("forced readmit: %d %s", code, body)
	}
	if code, _ := h.adminDo("POST", "/engines/nope/eject"); code != 404 {
		t.Fatalf("unknown engine: %d", code)
	}
}

// An engine ejected by its failures is readmitted by an operator only through a probe.
func TestAdminReadmitProbesFirst(t *testing.T) {
	h := start(t, setup{prefill: 1, decode: 2, engine: sim.Options{Tokens: 2}, config: func(c *config.Config) {
		pinContract(c)
		c.Recovery.EjectAfter = 1
		c.Recovery.ProbeIntervalS, c.Recovery.ProbeMaxIntervalS = 30, 30 // only the admin starts a probe
	}})
	d1 := h.fleet.Engine("d1")
	h.failUntilEjected("d1", "decode.status=500", 1)
	d1.InjectFault("decode.status=500", 1) // the readmission probe fails once
	if code, body := h.adminDo("POST", "/engines/d1/readmit"); code != 200 || strings.Contains(string(body), `"admitted"`) {
		t.Fatalf("readmit of a failing engine: %d %s", code, body)
	}
	e := h.waitState("d1", "ejected", 3*time.Second)
	if e.LastProbe == nil || e.LastProbe.Result != "failure" {
		t.Fatalf("after a failed readmission probe: %+v", e)
	}
	h.adminDo("POST", "/engines/d1/readmit")
	e = h.waitState("d1", "admitted", 3*time.Second)
	if e.LastProbe == nil || e.LastProbe.Result != "success" || d1.Stats().DecodeRequests != 3 {
		t.Fatalf("readmitted without its probe: %+v, %d decodes", e, d1.Stats().DecodeRequests)
	}
}
