package tests

import (
	"net"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/narwhal-router/narwhal/bench/sim"
	"github.com/narwhal-router/narwhal/config"
)

// A producer whose handoff descriptors fail validation (here its KV port is outside its
// kv.allowed_ports, as with a producer whose NIXL side channel moved) does not keep the
// consumers out of the fleet: their join checks try another producer when their partner's own
// leg fails, the bad producer is ejected, and every client request is served through the good
// producer within 5 s of the router's start.
func TestABadProducerDoesNotKeepTheConsumersOut(t *testing.T) {
	began := time.Now()
	h := start(t, setup{prefill: 2, decode: 2, engine: sim.Options{Tokens: 2}, noWait: true, config: func(c *config.Config) {
		c.Disaggregation.Policy = config.DisaggAlways
		for i := range c.Engines {
			if c.Engines[i].Name == "p0" { // p0 is first in fleet order: the old probes always chose it
				_, port, _ := net.SplitHostPort(c.Engines[i].KV.Endpoint)
				c.Engines[i].KV.Endpoint = ""
				// Its side channel listens on port; the allowed ports name another one.
				other := "6"
				if port == other {
					other = "7"
				}
				c.Engines[i].KV.AllowedPorts = []string{other}
			}
		}
	}})
	deadline := began.Add(5 * time.Second)
	for _, name := range []string{"d0", "d1"} {
		h.waitState(name, "admitted", time.Until(deadline))
	}
	if e := h.waitState("p0", "ejected", time.Until(deadline)); !strings.Contains(e.EjectReason, "descriptors fail validation") {
		t.Fatalf("the bad producer: %+v", e)
	}
	before := h.simEngine("p1").Stats().PrefillRequests
	const n = 20
	for i := range n {
		if r := h.send("/v1/completions", completion("served through the good producer", false)); r.status != http.StatusOK {
			t.Fatalf("request %d, %v after start: %d %s", i, time.Since(began).Round(time.Millisecond), r.status, r.body)
		}
	}
	if got := h.simEngine("p1").Stats().PrefillRequests - before; got != n {
		t.Fatalf("the good producer ran %d prefills of %d requests", got, n)
	}
	t.Logf("consumers admitted, bad producer ejected and %d requests served %v after start", n, time.Since(began).Round(time.Millisecond))
}
