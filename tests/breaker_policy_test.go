package tests

import (
	"fmt"
	"net/http"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/narwhal-router/narwhal/bench/sim"
	"github.com/narwhal-router/narwhal/config"
)

// Readmission by inference probe, sticky operator ejections and their explanations (issue 13).

// failUntilEjected injects fault on engine (count legs; 0: until cleared; "" injects nothing:
// the engine fails already) and sends requests until its breaker ejects it. The test sets
// recovery.eject_after low enough for that.
func (h *harness) failUntilEjected(engine, fault string, count int) {
	h.t.Helper()
	if fault != "" {
		h.inject(engine, fault, count)
	}
	// Bounded by time, not by a count: when the fleet served the same prompt a moment ago, its
	// failures wait up to recovery.blame_window_s for evidence that they are the prompt's.
	deadline := time.Now().Add(5 * time.Second)
	for n := 0; time.Now().Before(deadline); n++ {
		if s := h.engine(engine).State; s == "ejected" || s == "probing" {
			return
		}
		h.post("/v1/completions", shortPrompt)
	}
	h.t.Fatalf("engine %s not ejected within 5 s: %+v", engine, h.engine(engine))
}

// clientLegs counts the legs of kind engine served for clients (probes excluded).
func (h *harness) clientLegs(engine, kind string) int {
	n := 0
	for _, r := range h.simEngine(engine).Requests() {
		if r.Leg == kind && !strings.HasPrefix(r.Get("X-Request-Id"), "probe-") {
			n++
		}
	}
	return n
}

// metric is the value of one Prometheus series, 0 while it has not been recorded.
func (h *harness) metric(series string) float64 {
	h.t.Helper()
	re := regexp.MustCompile(`(?m)^` + regexp.QuoteMeta(series) + ` ([0-9.e+-]+)$`)
	m := re.FindStringSubmatch(h.scrape())
	if m == nil {
		return 0
	}
	v, _ := strconv.ParseFloat(m[1], 64)
	return v
}

// probeCount is how many probes of engine ended with result (the probe_results counter).
func (h *harness) probeCount(engine, result string) float64 {
	return h.metric(fmt.Sprintf(`narwhal_probe_results_total{engine=%q,result=%q}`, engine, result))
}

// waitProbes waits until engine has had n probes ending with result.
func (h *harness) waitProbes(engine, result string, n float64, timeout time.Duration) {
	h.t.Helper()
	eventually(h.t, timeout, func() bool { return h.probeCount(engine, result) >= n }, func() string {
		return fmt.Sprintf("engine %s: %v %s probes, want %v: %+v", engine, h.probeCount(engine, result), result, n, h.engine(engine))
	})
}

// The most common real failure: /health answers 200 while generation hangs. Without an engine
// contract the default readmission still runs an inference probe, so the hung consumer stays
// out for as long as it hangs, and comes back once it heals.
func TestHungConsumerIsNotReadmittedWhileItsHealthIsFine(t *testing.T) {
	h := start(t, setup{prefill: 1, decode: 2, engine: sim.Options{Tokens: 2}, config: func(c *config.Config) {
		c.Recovery.EjectAfter = 2
		c.Recovery.ProbeIntervalS, c.Recovery.ProbeMaxIntervalS = 0.1, 0.2
		c.Engine.FirstTokenTimeoutS = 0.3
	}})
	d0 := h.simEngine("d0")
	h.failUntilEjected("d0", "decode.hang_first_token", 0)
	if resp, err := http.Get(d0.URL() + "/health"); err != nil || resp.StatusCode != 200 {
		t.Fatalf("the hung engine's /health: %v %v", resp, err)
	} else {
		resp.Body.Close()
	}
	// Probe after probe fails on the first-token timeout; never once is the engine admitted.
	eventually(t, 10*time.Second, func() bool {
		if s := h.engine("d0").State; s == "admitted" {
			t.Fatalf("readmitted while it hangs: %+v", h.engine("d0"))
		}
		return h.probeCount("d0", "failure") >= 3
	}, func() string { return fmt.Sprintf("want 3 failed probes: %+v", h.engine("d0")) })
	e := h.engine("d0")
	if e.Readmission != "probe" || e.LastProbe == nil || e.LastProbe.Mode != "probe" ||
		!strings.Contains(e.LastProbe.Reason, "decode leg on d0") || e.EjectedBy != "breaker" ||
		!strings.Contains(e.EjectReason, "first_token_timeout on the decode leg") {
		t.Fatalf("while hanging: %+v %+v", e, e.LastProbe)
	}
	if n := h.metric(`narwhal_breaker_transitions_total{engine="d0",from="probing",to="admitted"}`); n != 0 {
		t.Fatalf("%v readmissions while it hangs", n)
	}

	d0.ClearFaults()
	e = h.waitState("d0", "admitted", 5*time.Second)
	if e.LastProbe.Result != "success" || e.LastProbe.Mode != "probe" || e.LastProbe.Reason != "inference probe completed" {
		t.Fatalf("readmitted by %+v", e.LastProbe)
	}
}

// An operator's ejection holds: probes run for an engine the breaker ejected, never for the
// operator's. The reason and "by admin" show in /engines and the tree dump. Readmitting it
// takes effect at once, while an engine ejected by its failures is probed first unless forced.
func TestAdminEjectionHoldsUntilAnAdminReadmits(t *testing.T) {
	h := start(t, setup{prefill: 1, decode: 3, engine: sim.Options{Tokens: 2}, config: func(c *config.Config) {
		c.Recovery.EjectAfter = 1
		c.Recovery.ProbeIntervalS, c.Recovery.ProbeMaxIntervalS = 0.05, 0.05
	}})
	if code, body := h.adminDo("POST", "/engines/d1/eject?reason=disk+swap"); code != 200 || !strings.Contains(string(body), `"ejected"`) {
		t.Fatalf("eject: %d %s", code, body)
	}
	// d0, ejected by its failures, is probed over and over meanwhile: the clock that would
	// have readmitted d1 has ticked many times.
	h.failUntilEjected("d0", "decode.status=500", 0)
	h.waitProbes("d0", "failure", 5, 10*time.Second)

	e := h.engine("d1")
	if e.State != "ejected" || e.EjectedBy != "admin" || e.EjectReason != "disk swap" || e.NextProbe != nil || e.LastProbe != nil {
		t.Fatalf("admin-ejected engine: %+v", e)
	}
	if n := h.probeCount("d1", "success") + h.probeCount("d1", "failure") + h.probeCount("d1", "inconclusive"); n != 0 {
		t.Fatalf("%v probes of an admin-ejected engine", n)
	}
	if n := len(h.simEngine("d1").Requests()); n != 0 {
		t.Fatalf("the admin-ejected engine got %d requests", n)
	}
	if d := h.engine("d0"); d.EjectedBy != "breaker" || !strings.Contains(d.EjectReason, "engine_status on the decode leg") {
		t.Fatalf("failure-ejected engine: %+v", d)
	}
	code, tree := h.adminDo("GET", "/debug/tree?format=text")
	if code != 200 || !regexp.MustCompile(`d1 \[engine\] .*state=ejected .*ejected_by=admin reason="disk swap"`).Match(tree) {
		t.Fatalf("tree dump: %d %s", code, tree)
	}

	// An admin ejection of an engine the breaker ejected makes it the operator's: no more probes.
	if code, _ := h.adminDo("POST", "/engines/d0/eject?reason=investigating"); code != 200 {
		t.Fatal("eject d0")
	}
	// Counted on the engine itself: the Prometheus counter lags by up to a reporting interval,
	// so it may still show probes that ran before the operator took d0 over.
	before := len(h.simEngine("d0").Requests())
	d2probes := h.probeCount("d2", "failure")
	h.failUntilEjected("d2", "decode.status=500", 0)
	h.waitProbes("d2", "failure", d2probes+3, 10*time.Second)
	if n := len(h.simEngine("d0").Requests()); n > before+1 { // one may have been in flight
		t.Fatalf("d0 probed %v more times after the admin took it over", n-before)
	}
	if e := h.engine("d0"); e.EjectedBy != "admin" || e.EjectReason != "investigating" {
		t.Fatalf("d0 after the admin took it over: %+v", e)
	}

	// Readmitting the operator's ejection is immediate (no probe)...
	if code, body := h.adminDo("POST", "/engines/d1/readmit"); code != 200 || !strings.Contains(string(body), `"admitted"`) {
		t.Fatalf("readmit of the admin-ejected engine: %d %s", code, body)
	}
	if e := h.engine("d1"); e.LastProbe != nil || e.EjectedBy != "" || e.EjectReason != "" {
		t.Fatalf("after the admin readmit: %+v", e)
	}
	// ...while the failure-ejected d2 is probed first (and still fails), unless forced.
	if code, body := h.adminDo("POST", "/engines/d2/readmit"); code != 200 || strings.Contains(string(body), `"admitted"`) {
		t.Fatalf("readmit of a failing engine: %d %s", code, body)
	}
	if e := h.waitState("d2", "ejected", 3*time.Second); e.LastProbe == nil || e.LastProbe.Result != "failure" {
		t.Fatalf("after the readmission probe: %+v", e)
	}
	if code, body := h.adminDo("POST", "/engines/d2/readmit?force=true"); code != 200 || !strings.Contains(string(body), `"admitted"`) {
		t.Fatalf("forced readmit: %d %s", code, body)
	}
	h.simEngine("d2").ClearFaults()
	h.simEngine("d0").ClearFaults()
	if code, body := h.adminDo("POST", "/engines/d0/readmit"); code != 200 || !strings.Contains(string(body), `"admitted"`) {
		t.Fatalf("readmit d0: %d %s", code, body)
	}
}
