package tests

import (
	"fmt"
	"regexp"
	"strconv"
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
func tenantsHarness(t *testing.T, fc func(*config.FlowControl), more ...func(*config.Config)) (h *harness, release func()) {
	t.Helper()
	h = start(t, setup{both: 1, config: configs(maxInflight(1), func(c *config.Config) {
		c.Disaggregation.Policy = config.DisaggNever
		c.Admission.QueueTimeoutS = 20
		c.Server.APIKeys = []string{"k-occupant"}
		fc(&c.FlowControl)
		for _, m := range more {
			m(c)
		}
	}), engine: sim.Options{Tokens: 2}})
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
		// Every prompt is as long as the others (the same cost in the queue) and names its
		// request, so that the engine's record tells the order the slot went in.
		id := newRequestID(t)
		resp, _ := h.startWithID(id, "/v1/completions", completion("request "+id, false), append([]string{"Authorization", "Bearer " + k}, headers...)...)
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

// awaitAll waits for n requests' ends on done and fails the test unless each is a 200.
func awaitAll(t *testing.T, n int, done <-chan string) {
	t.Helper()
	for range n {
		select {
		case line := <-done:
			if !strings.HasSuffix(line, " 200") {
				t.Fatalf("request ended %s, want 200", line)
			}
		case <-time.After(30 * time.Second):
			t.Fatal("a queued request never ended")
		}
	}
}

// servedOrder is the order the requests got the engine's slot in: the order the engine received
// them (one slot: each was sent only once the one before it ended).
func (h *harness) servedOrder(ids ...string) []string {
	h.t.Helper()
	var out []string
	for _, leg := range h.legs("decode") {
		for _, id := range ids {
			if strings.Contains(string(leg.Body), `"request `+id+`"`) {
				out = append(out, id)
			}
		}
	}
	if len(out) != len(ids) {
		h.t.Fatalf("the engine received %d of the %d requests", len(out), len(ids))
	}
	return out
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

	awaitAll(t, len(floodIDs), floodDone)
	awaitAll(t, len(fewIDs), fewDone)
	isFew := map[string]bool{}
	for _, id := range fewIDs {
		isFew[id] = true
	}
	var order []bool // true: the second tenant's
	for _, id := range h.servedOrder(append(floodIDs, fewIDs...)...) {
		order = append(order, isFew[id])
	}
	// Arrival order would serve the 16 first: the second tenant's last would be 20th. Equal
	// weights interleave them (ties go to the earlier arrival): its last is 8th.
	last := 0
	for i, few := range order {
		if few {
			last = i + 1
		}
	}
	if last > 8 {
		t.Fatalf("the second tenant's last request was served %d-th of %d (order %v): it waited behind the flood", last, len(order), order)
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
	jobIDs, jobsDone := queued(t, h, repeat("k-jobs", 5))
	chatIDs, chatDone := queued(t, h, []string{"k-chat"})

	r := h.send("/v1/completions", completion("later", false), "Authorization", "Bearer k-jobs", "X-Narwhal-Priority", "scavenger")
	expectError(t, r, 503, "shed", `no engine has room, and requests of band "scavenger" are shed first under load`)
	if r.header.Get("Retry-After") == "" {
		t.Fatal("a shed request without Retry-After")
	}
	r = h.send("/v1/completions", completion("sneak", false), "Authorization", "Bearer k-jobs", "X-Narwhal-Priority", "interactive")
	expectError(t, r, 400, "band_not_allowed", `this API key may not use band "interactive"`)

	release()
	awaitAll(t, 1, chatDone)
	awaitAll(t, 5, jobsDone)
	if order := h.servedOrder(append(jobIDs, chatIDs...)...); order[0] != chatIDs[0] {
		t.Fatalf("served %v: a standard request went before the interactive one (%s) queued after it", order, chatIDs[0])
	}
	h.expectScrape(`narwhal_flow_refused_total{band="scavenger",reason="shed",tenant="jobs"} 1`,
		`narwhal_flow_admitted_total{band="interactive",tenant="chat"} 1`)
}

// A full queue makes room for a higher band by shedding the newest request of the lowest band
// below it; an arrival with no lower band to shed is refused.
func TestAFullQueueShedsTheLowestBandFirst(t *testing.T) {
	h, release := tenantsHarness(t, func(fc *config.FlowControl) {
		fc.Bands = []config.FlowBand{{Name: "interactive"}, {Name: "standard"}, {Name: "batch"}}
		fc.Tenants = []config.Tenant{{Name: "any", APIKeys: []string{"k"}, Band: "standard", Bands: []string{"interactive", "batch"}}}
	}, func(c *config.Config) { c.Admission.MaxQueue = 3 })
	_, olderDone := queued(t, h, []string{"k"}, "X-Narwhal-Priority", "batch")
	newerIDs, newerDone := queued(t, h, []string{"k"}, "X-Narwhal-Priority", "batch")
	_, stdDone := queued(t, h, []string{"k"})

	// Full: an interactive arrival sheds the newest batch request.
	_, interactiveDone := queued(t, h, []string{"k"}, "X-Narwhal-Priority", "interactive")
	select {
	case line := <-newerDone:
		if line != newerIDs[0]+" 503" {
			t.Fatalf("the newest batch request: %s, want 503", line)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("the newest batch request was not shed")
	}
	h.expectScrape(`narwhal_flow_refused_total{band="batch",reason="shed",tenant="any"} 1`)
	// Full again, with nothing below standard but the older batch request: a standard arrival
	// sheds it; then a batch arrival has nothing lower to shed and is refused.
	_, std2Done := queued(t, h, []string{"k"})
	if line := <-olderDone; !strings.HasSuffix(line, " 503") {
		t.Fatalf("the older batch request: %s, want 503", line)
	}
	r := h.send("/v1/completions", completion("late batch", false), "Authorization", "Bearer k", "X-Narwhal-Priority", "batch")
	expectError(t, r, 503, "queue_full", "no engine has room and the admission queue is full")

	release()
	for _, done := range []<-chan string{interactiveDone, stdDone, std2Done} {
		select {
		case line := <-done:
			if !strings.HasSuffix(line, " 200") {
				t.Fatalf("a request that kept its place: %s", line)
			}
		case <-time.After(20 * time.Second):
			t.Fatal("a queued request never completed")
		}
	}
}

// A request that cannot get a slot before its deadline is refused at once, before it takes
// one, when the queue's measured drain rate says the work ahead of it would take too long.
func TestARequestThatCannotMeetItsDeadlineIsRefusedBeforeItWaits(t *testing.T) {
	h := start(t, setup{both: 1, engine: sim.Options{Tokens: 2, TTFT: 100 * time.Millisecond}, config: configs(maxInflight(1), func(c *config.Config) {
		c.Disaggregation.Policy = config.DisaggNever
		c.Admission.QueueTimeoutS = 20
		c.FlowControl.Bands = []config.FlowBand{{Name: "interactive"}, {Name: "standard"}}
		c.FlowControl.Tenants = []config.Tenant{{Name: "chat", APIKeys: []string{"k-chat"}, Band: "interactive"}, {Name: "jobs", APIKeys: []string{"k-jobs"}}}
	})})
	// Thirty interactive requests of about 100 ms each through one slot: the queue drains for
	// three seconds and measures its rate in the first.
	var wg sync.WaitGroup
	for range 30 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			if r := h.send("/v1/completions", completion("work", false), "Authorization", "Bearer k-chat"); r.status != 200 {
				t.Errorf("an interactive request: %d %s", r.status, r.body)
			}
		}()
	}
	// Once 12 went through, some 18 still wait (about 1.8 s of higher-band work): a standard
	// request with a 0.3 s deadline is refused at once.
	admitted := regexp.MustCompile(`(?m)^narwhal_flow_admitted_total\{band="interactive",tenant="chat"\} ([0-9]+)$`)
	eventually(t, 10*time.Second, func() bool {
		m := admitted.FindStringSubmatch(h.scrape())
		if m == nil {
			return false
		}
		n, _ := strconv.Atoi(m[1])
		return n >= 12 // the queue drained for over a second: its rate is measured
	}, func() string { return "fewer than 12 requests went through the queue" })
	r := h.send("/v1/completions", completion("hurry", false), "Authorization", "Bearer k-jobs", "X-Narwhal-Deadline-S", "0.3")
	expectError(t, r, 503, "deadline_unmeetable", "no engine has room, and at the rate the admission queue drains")
	if r.elapsed > 250*time.Millisecond {
		t.Errorf("refused after %v: it should not have waited", r.elapsed)
	}
	wg.Wait()
	h.expectScrape(`narwhal_flow_refused_total{band="standard",reason="deadline_unmeetable",tenant="jobs"} 1`)
}

// A band's TTFT target bounds how long its requests wait: past it, the request is refused as one
// that cannot meet it (503), not held to its own, later deadline.
func TestABandsTTFTTargetBoundsItsWait(t *testing.T) {
	h, release := tenantsHarness(t, func(fc *config.FlowControl) {
		fc.Bands = []config.FlowBand{{Name: "interactive", TTFTTargetS: 0.3}, {Name: "standard"}}
		fc.Tenants = []config.Tenant{{Name: "chat", APIKeys: []string{"k"}, Band: "interactive"}}
	})
	defer release()
	r := h.send("/v1/completions", completion("quick", false), "Authorization", "Bearer k")
	expectError(t, r, 503, "deadline_unmeetable", `no engine had room within band "interactive"'s ttft_target_s`)
	if r.elapsed < 300*time.Millisecond || r.elapsed > 3*time.Second {
		t.Fatalf("answered after %v, want the band's 0.3 s target", r.elapsed)
	}
}
