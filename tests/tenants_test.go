package tests

import (
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/narwhal-router/narwhal/bench/sim"
	"github.com/narwhal-router/narwhal/config"
)

// tenantsHarness is one engine with one slot, held by a request whose first token never comes,
// so that every later request waits in the admission queue until the test hangs it up: the
// order the queue then serves them in is the order they complete in.
func tenantsHarness(t *testing.T, fc func(*config.FlowControl)) (h *harness, release func()) {
	t.Helper()
	h = start(t, setup{both: 1, engine: sim.Options{Tokens: 2}, config: configs(maxInflight(1), func(c *config.Config) {
		c.Disaggregation.Policy = config.DisaggNever
		c.Admission.QueueTimeoutS = 20
		c.Server.APIKeys = []string{"k-occupant"}
		fc(&c.FlowControl)
	})})
	occupant, resp, hangUp := h.startRequest("/v1/completions", completion("hold @sim:decode.hang_first_token", true), "Authorization", "Bearer k-occupant")
	eventually(t, 5*time.Second, func() bool { return h.requestPhase(occupant) == "decode" },
		func() string { return "the occupant never reached its decode leg: " + h.requestPhase(occupant) })
	return h, func() {
		hangUp()
		if r := <-resp; r != nil {
			r.Body.Close()
		}
	}
}

// queued starts a request for each key and waits until every one of them is in the queue.
func queued(t *testing.T, h *harness, keys []string, headers ...string) (ids []string, done <-chan string) {
	t.Helper()
	out := make(chan string, len(keys))
	var wg sync.WaitGroup
	for _, k := range keys {
		id, resp, _ := h.startRequest("/v1/completions", completion("same prompt for all", false), append([]string{"Authorization", "Bearer " + k}, headers...)...)
		ids = append(ids, id)
		wg.Add(1)
		go func() {
			defer wg.Done()
			if r := <-resp; r != nil {
				r.Body.Close()
				out <- fmt.Sprintf("%s %d", id, r.StatusCode)
			}
		}()
	}
	eventually(t, 5*time.Second, func() bool {
		for _, id := range ids {
			if h.requestPhase(id) != "queued" {
				return false
			}
		}
		return true
	}, func() string { return "not every request is queued" })
	return ids, out
}

func repeat(key string, n int) []string { return strings.Fields(strings.Repeat(key+" ", n)) }

// One tenant floods the queue; another's few requests, sent after, are served alongside the
// flood, not behind it: slots go to the two in proportion to their weights.
func TestATenantThatFloodsTheQueueDoesNotHoldBackAnother(t *testing.T) {
	h, release := tenantsHarness(t, func(fc *config.FlowControl) {
		fc.Tenants = []config.Tenant{{Name: "batch-team", APIKeys: []string{"k-a"}}, {Name: "chat-team", APIKeys: []string{"k-b"}}}
	})
	floodIDs, floodDone := queued(t, h, repeat("k-a", 16))
	fewIDs, fewDone := queued(t, h, repeat("k-b", 4))
	release()

	isFew := map[string]bool{}
	for _, id := range fewIDs {
		isFew[id] = true
	}
	var order []bool // true: the second tenant's
	deadline := time.After(30 * time.Second)
	for len(order) < len(floodIDs)+len(fewIDs) {
		var line string
		select {
		case line = <-floodDone:
		case line = <-fewDone:
		case <-deadline:
			t.Fatalf("only %d of %d requests completed", len(order), len(floodIDs)+len(fewIDs))
		}
		id, status, _ := strings.Cut(line, " ")
		if status != "200" {
			t.Fatalf("request %s: status %s", id, status)
		}
		order = append(order, isFew[id])
	}
	// Arrival order would serve the 16 first: the second tenant's last would be 20th. Equal
	// weights interleave them (ties go to the earlier arrival): its last is 8th, 9th if the
	// client sees two neighbouring completions in the other order.
	last := 0
	for i, few := range order {
		if few {
			last = i + 1
		}
	}
	if last > 9 {
		t.Fatalf("the second tenant's last request completed %d-th of %d (order %v): it waited behind the flood", last, len(order), order)
	}
	for _, id := range fewIDs {
		if line := h.accessLine(id); str(line["tenant"]) != "chat-team" || str(line["band"]) != "default" {
			t.Fatalf("access line of %s: tenant %v band %v", id, line["tenant"], line["band"])
		}
	}
	h.expectScrape(`narwhal_flow_admitted_total{band="default",tenant="chat-team"} 4`, `narwhal_flow_tokens_total{band="default",tenant="batch-team"}`)
}

// expectScrape waits (counters are reported once a second) until /metrics holds every want.
func (h *harness) expectScrape(want ...string) {
	h.t.Helper()
	var scrape string
	eventually(h.t, 5*time.Second, func() bool {
		scrape = h.scrape()
		for _, w := range want {
			if !strings.Contains(scrape, w) {
				return false
			}
		}
		return true
	}, func() string { return fmt.Sprintf("/metrics lacks one of %q", want) })
}

// A higher band is served first, whenever it arrived; a sheddable band never waits; a band
// outside a key's allowance is a 400.
func TestBandsOrderTheQueueAndTheLowestIsShed(t *testing.T) {
	h, release := tenantsHarness(t, func(fc *config.FlowControl) {
		fc.Bands = []config.FlowBand{{Name: "interactive"}, {Name: "standard"}, {Name: "scavenger", Sheddable: true}}
		fc.Tenants = []config.Tenant{
			{Name: "jobs", APIKeys: []string{"k-jobs"}, Bands: []string{"scavenger"}},
			{Name: "chat", APIKeys: []string{"k-chat"}, Band: "interactive"},
		}
	})
	_, jobsDone := queued(t, h, repeat("k-jobs", 5))
	chatIDs, chatDone := queued(t, h, []string{"k-chat"})

	r := h.send("/v1/completions", completion("later", false), "Authorization", "Bearer k-jobs", "X-Narwhal-Priority", "scavenger")
	expectError(t, r, 503, "shed", `no engine has room, and requests of band "scavenger" are shed first under load`)
	if r.header.Get("Retry-After") == "" {
		t.Fatal("a shed request without Retry-After")
	}
	r = h.send("/v1/completions", completion("sneak", false), "Authorization", "Bearer k-jobs", "X-Narwhal-Priority", "interactive")
	expectError(t, r, 400, "band_not_allowed", `this API key may not use band "interactive"`)

	release()
	select {
	case line := <-chatDone:
		if line != chatIDs[0]+" 200" {
			t.Fatalf("chat: %s", line)
		}
	case line := <-jobsDone:
		t.Fatalf("a standard request (%s) was served before the interactive one queued after it", line)
	case <-time.After(20 * time.Second):
		t.Fatal("nothing completed")
	}
	for range 5 {
		select {
		case <-jobsDone:
		case <-time.After(20 * time.Second):
			t.Fatal("the standard requests did not all complete")
		}
	}
	h.expectScrape(`narwhal_flow_refused_total{band="scavenger",reason="shed",tenant="jobs"} 1`,
		`narwhal_flow_admitted_total{band="interactive",tenant="chat"} 1`)
}
