package tests

import (
	"fmt"
	"net/http"
	"testing"
	"time"

	"github.com/narwhal-router/narwhal/bench/sim"
	"github.com/narwhal-router/narwhal/config"
)

// At light load (one request at a time, so every producer is idle when a prompt arrives) the
// default placement policy, prefix, spreads the prefills over the producers: the load bound
// leaves every idle engine under it, and a prompt no engine holds goes by p2c. A producer added
// while the router runs takes its share as soon as it is admitted.
func TestPlacementAtLightLoadSpreadsPrefillsAndANewProducerTakesItsShare(t *testing.T) {
	h := start(t, setup{prefill: 3, decode: 1, engine: sim.Options{Tokens: 2}, config: func(c *config.Config) {
		c.Disaggregation.Policy = config.DisaggAlways
		c.Placement.PrefixBlockWords = 4 // every prompt below is several blocks long
	}})
	producers := []string{"p0", "p1", "p2"}
	prefills := func(name string) int64 { return h.simEngine(name).Stats().PrefillRequests }
	const n = 300
	for i := range n {
		if r := h.send("/v1/completions", completion(fmt.Sprintf("light load prompt %d about subject %d", i, i*7919), false)); r.status != http.StatusOK {
			t.Fatalf("request %d: %d %s", i, r.status, r.body)
		}
	}
	got := map[string]int64{}
	for _, p := range producers {
		got[p] = prefills(p)
	}
	for _, p := range producers {
		if share := float64(got[p]) / n; share < 0.20 || share > 0.47 {
			t.Errorf("%s ran %d of %d prefills (%.0f%%), want 20–47%%: %v", p, got[p], n, 100*share, got)
		}
	}
	t.Logf("prefills of %d requests at light load: %v", n, got)

	p3 := extraEngine(t, h, "p3", sim.RolePrefill)
	if code, body := h.adminSend("POST", "/engines", engineJSON(p3)); code != http.StatusCreated {
		t.Fatalf("POST /engines p3: %d %s", code, body)
	}
	h.waitState("p3", "admitted", 5*time.Second)
	admitted := time.Now()
	sent := 0
	for time.Since(admitted) < 2*time.Second && (sent < 40 || p3.Stats().PrefillRequests == 0) {
		if r := h.send("/v1/completions", completion(fmt.Sprintf("after p3 joined %d", sent), false)); r.status != http.StatusOK {
			t.Fatalf("request %d after p3 joined: %d %s", sent, r.status, r.body)
		}
		sent++
	}
	// Four producers: a quarter each on average; p3 gets at least half of that within 2 s.
	if took := p3.Stats().PrefillRequests; float64(took) < 0.125*float64(sent) {
		t.Fatalf("the producer added at run time ran %d of the %d prefills in the %v after it was admitted", took, sent, time.Since(admitted).Round(time.Millisecond))
	}
	t.Logf("p3 ran %d of %d prefills within %v of its admission", p3.Stats().PrefillRequests, sent, time.Since(admitted).Round(time.Millisecond))
}
