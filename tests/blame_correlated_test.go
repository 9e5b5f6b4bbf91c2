package tests

import (
	"fmt"
	"net"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/narwhal-router/narwhal/bench/sim"
	"github.com/narwhal-router/narwhal/config"
)

// Failures that come together — a burst of poison requests, a producer whose handoffs nobody can
// read, an engine that always pushes back — are blamed by comparison (actors/blameboard.go), so
// they do not empty a healthy fleet.

// healthyOK sends a healthy streamed request and reports whether it was served in full.
func (h *harness) healthyOK(prompt string) (bool, string) {
	r := h.send("/v1/completions", completion(prompt, true))
	if r.status == 200 && strings.HasSuffix(string(r.body), "data: [DONE]\n\n") {
		return true, ""
	}
	return false, fmt.Sprintf("%s: %d %.200s", r.id, r.status, r.body)
}

// expectFleetAdmitted fails the test unless every engine is admitted with a clean streak.
func (h *harness) expectFleetAdmitted(when string) {
	h.t.Helper()
	for _, e := range h.engines() {
		if e.State != "admitted" || e.Streak != 0 {
			h.t.Fatalf("%s: %s is %s with streak %d (%s)", when, e.Name, e.State, e.Streak, e.EjectReason)
		}
	}
}

// Three poison requests in a row, each failing on both consumers (max_attempts: 2), with
// eject_after: 2: the comparison finds each failure to be the request's once the consumers
// serve other requests, so nothing is ejected and healthy requests keep their 200. (Under a
// ration of one commit per blamed request, both consumers were ejected and healthy requests
// got 503.)
func TestPoisonBurstEjectsNothing(t *testing.T) {
	h := start(t, setup{prefill: 2, decode: 2, engine: sim.Options{Tokens: 2}, config: configs(retries(2), timeouts(10, 0.3, 10),
		func(c *config.Config) { c.Recovery.EjectAfter, c.Recovery.BlameWindowS = 2, 5 })}) // the default window: the burst lasts ~2 s
	for i := range 4 {
		expectDone(t, h.send("/v1/completions", completion(fmt.Sprintf("warm-up %d", i), true)))
	}
	for i := range 3 {
		r := h.send("/v1/completions", completion(fmt.Sprintf("poison %d @sim:decode.hang_first_token", i), true))
		if r.status != 504 {
			t.Fatalf("poison %d: status %d, want 504: %.200s", i, r.status, r.body)
		}
	}
	// Healthy traffic from here on: every request is served, and it is the evidence that the
	// consumers serve others.
	i := 0
	eventually(t, 5*time.Second, func() bool {
		i++
		if ok, why := h.healthyOK(fmt.Sprintf("healthy %d", i)); !ok {
			t.Fatalf("healthy request after the burst failed: %s", why)
		}
		return h.attributed("decode", "first_token_timeout") >= 6
	}, func() string {
		return fmt.Sprintf("%v of the 6 hung legs attributed to their requests", h.attributed("decode", "first_token_timeout"))
	})
	if n := h.ejections(); n != 0 {
		t.Fatalf("%v ejections after the burst", n)
	}
	h.expectFleetAdmitted("after the burst")
}

// Four clients loop a poison request (close_after=0) beside healthy traffic, with eject_after:
// 3: with one attempt per request the same request's failures on different engines are
// compared across its sends; with two, within each send too. Nothing is ejected and every
// healthy request succeeds. (Measured on the ration of commits: hundreds of ejections and
// whole-wave restarts, healthy success at 59% and 78%.)
func TestSustainedPoisonLoopsBesideHealthyTraffic(t *testing.T) {
	for _, attempts := range []int{1, 2} {
		t.Run(fmt.Sprintf("max_attempts=%d", attempts), func(t *testing.T) {
			h := start(t, setup{prefill: 2, decode: 2, engine: sim.Options{Tokens: 2}, config: configs(retries(attempts),
				func(c *config.Config) { c.Recovery.EjectAfter = 3 })})
			var (
				stop                        atomic.Bool
				healthy, healthyOK, poisons atomic.Int64
				mu                          sync.Mutex
				failures                    []string
				wg                          sync.WaitGroup
			)
			for w := range 2 {
				wg.Add(1)
				go func() {
					defer wg.Done()
					for i := 0; !stop.Load(); i++ {
						healthy.Add(1)
						if ok, why := h.healthyOK(fmt.Sprintf("healthy %d.%d", w, i)); ok {
							healthyOK.Add(1)
						} else {
							mu.Lock()
							failures = append(failures, why)
							mu.Unlock()
						}
					}
				}()
			}
			// The poison loops join traffic the fleet already serves.
			eventually(t, 5*time.Second, func() bool { return healthyOK.Load() >= 2 }, func() string { return "no healthy request served" })
			for w := range 4 {
				wg.Add(1)
				go func() {
					defer wg.Done()
					for !stop.Load() {
						h.send("/v1/completions", completion("poison @sim:decode.close_after=0", w%2 == 0))
						poisons.Add(1)
					}
				}()
			}
			// The load runs until an engine is ejected, or until 100 of the poison's failures were
			// found to be the request's: blamed on the consumers instead, they would have ejected
			// both many times over (eject_after: 3). About two seconds of load.
			var out []string
			eventually(t, 15*time.Second, func() bool {
				out = h.ejectedEngines()
				return len(out) > 0 || h.attributed("decode", "closed_early") >= 100
			}, func() string {
				return fmt.Sprintf("%v of the poison's failures attributed to it", h.attributed("decode", "closed_early"))
			})
			stop.Store(true)
			wg.Wait()
			if len(out) > 0 {
				t.Errorf("engines out of placement during the load: %v", out)
			}
			t.Logf("%d poison sends, %d healthy requests, %d served (%.1f%%), %v ejections, %v failures attributed",
				poisons.Load(), healthy.Load(), healthyOK.Load(), 100*float64(healthyOK.Load())/float64(max(healthy.Load(), 1)),
				h.ejections(), h.attributed("decode", "closed_early"))
			if len(failures) > 0 {
				t.Fatalf("%d of %d healthy requests failed, e.g. %s", len(failures), healthy.Load(), failures[0])
			}
			if n := h.ejections(); n != 0 {
				t.Fatalf("%v ejections", n)
			}
			if h.attributed("decode", "closed_early") == 0 {
				t.Fatal("no failure was attributed to the poison request")
			}
		})
	}
}

// ejectedEngines names the engines not admitted now.
func (h *harness) ejectedEngines() []string {
	var out []string
	for _, e := range h.engines() {
		if e.State != "admitted" {
			out = append(out, e.Name+" "+e.State)
		}
	}
	return out
}

// deadPort is a port on 127.0.0.1 with nothing listening.
func deadPort(t *testing.T) int {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	port := ln.Addr().(*net.TCPAddr).Port
	ln.Close()
	return port
}

// A producer whose descriptors name a port of its host with nothing listening: every consumer's
// KV read fails (500). Its handoffs fail on both consumers, so it is blamed and ejected; both
// consumers stay admitted with a clean streak and serve every request through the other
// producer, and their probes never pair with it. (Before: each failed read was blamed on the
// consumer, both consumers were ejected and every client got 503.)
func TestBadProducerIsBlamedNotItsConsumers(t *testing.T) {
	dead := deadPort(t)
	h := start(t, setup{prefill: 2, decode: 2, engine: sim.Options{Tokens: 2}, config: configs(retries(2),
		func(c *config.Config) {
			c.Recovery.EjectAfter = 2
			c.Recovery.BlameWindowS = 1
			c.Recovery.ProbeIntervalS, c.Recovery.ProbeMaxIntervalS = 0.2, 0.4
			for i := range c.Engines {
				if c.Engines[i].Name == "p0" { // unpinned: its descriptors may name its own host's allowed ports
					_, port, _ := net.SplitHostPort(c.Engines[i].KV.Endpoint)
					c.Engines[i].KV.Endpoint = ""
					c.Engines[i].KV.AllowedPorts = []string{port, strconv.Itoa(dead)}
				}
			}
		})})
	h.inject("p0", "prefill.kv_port="+strconv.Itoa(dead), 0)
	began := time.Now()
	var failed []string
	for i := 0; h.engine("p0").State == "admitted"; i++ {
		if i == 200 {
			t.Fatalf("p0 not ejected after %d requests: %+v", i, h.engine("p0"))
		}
		if ok, why := h.healthyOK(fmt.Sprintf("request %d", i)); !ok {
			failed = append(failed, why)
		}
		for _, d := range []string{"d0", "d1"} {
			if e := h.engine(d); e.State != "admitted" {
				t.Fatalf("consumer %s is %s (%s) while p0's handoffs fail", d, e.State, e.EjectReason)
			}
		}
	}
	ejectedAfter := time.Since(began)
	p0 := h.engine("p0")
	if !strings.Contains(p0.EjectReason, "handoff failed on consumer") {
		t.Fatalf("p0 ejected for %q", p0.EjectReason)
	}
	if len(failed) > 0 {
		t.Fatalf("%d requests failed while p0 was admitted (each had a retry through p1), e.g. %s", len(failed), failed[0])
	}
	// Both consumers keep serving, through p1, past the blame window (a failure still held
	// would count against its consumer by then); p0 stays out (its probes pair with a consumer
	// whose read of its handoff fails).
	for i := 0; time.Since(began) < ejectedAfter+1500*time.Millisecond || i < 20; i++ {
		if ok, why := h.healthyOK(fmt.Sprintf("after %d", i)); !ok {
			t.Fatalf("request after p0's ejection failed: %s", why)
		}
	}
	eventually(t, 5*time.Second, func() bool {
		e := h.engine("p0")
		return e.LastProbe != nil && e.EjectedAt != nil && e.LastProbe.At.After(*e.EjectedAt)
	}, func() string { return fmt.Sprintf("p0 was never probed: %+v", h.engine("p0")) })
	t.Logf("p0's probe: %+v", *h.engine("p0").LastProbe)
	for _, d := range []string{"d0", "d1"} {
		if e := h.engine(d); e.State != "admitted" || e.Streak != 0 {
			t.Fatalf("consumer %s is %s with streak %d after p0's ejection", d, e.State, e.Streak)
		}
		if n := h.metric(fmt.Sprintf(`narwhal_breaker_transitions_total{engine=%q,from="admitted",to="ejected"}`, d)); n != 0 {
			t.Fatalf("consumer %s was ejected %v times", d, n)
		}
	}
	if e := h.engine("p0"); e.State == "admitted" {
		t.Fatalf("p0 readmitted while its descriptors are unreadable: %+v", e.LastProbe)
	}
	t.Logf("timeline: p0 ejected %v after its fault (%s), consumers admitted throughout", ejectedAfter.Round(time.Millisecond), p0.EjectReason)
}

// One consumer of three answers every request 503 (with Retry-After: 1). Once it has pushed
// back for longer than recovery.backpressure.bound_s with no success it is passed over, never
// ejected nor quarantined: fewer than 5% of the requests are placed on it, and every request is
// served. (Before: a third of the requests went to it first, each paying a prefill.)
func TestAlwaysBusyConsumerIsPassedOver(t *testing.T) {
	const requests = 600
	h := start(t, setup{prefill: 1, decode: 3, engine: sim.Options{Tokens: 2}, config: configs(retries(2),
		func(c *config.Config) { c.Recovery.Backpressure.BoundS = 0.02 })})
	h.inject("d0", "decode.status=503", 0)
	var (
		next, served atomic.Int64
		wg           sync.WaitGroup
		mu           sync.Mutex
		failures     []string
	)
	for range 4 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := next.Add(1); i <= requests; i = next.Add(1) {
				if ok, why := h.healthyOK(fmt.Sprintf("request %d", i)); ok {
					served.Add(1)
				} else {
					mu.Lock()
					failures = append(failures, why)
					mu.Unlock()
				}
			}
		}()
	}
	wg.Wait()
	placed := h.clientLegs("d0", "decode")
	t.Logf("%d of %d requests placed on the always-503 consumer (%.1f%%), %d served", placed, requests,
		100*float64(placed)/requests, served.Load())
	if len(failures) > 0 {
		t.Fatalf("%d requests failed, e.g. %s", len(failures), failures[0])
	}
	if placed*20 >= requests {
		t.Fatalf("%d of %d requests were placed on d0 (want fewer than 5%%)", placed, requests)
	}
	if e := h.engine("d0"); e.State != "admitted" || e.Streak != 0 {
		t.Fatalf("d0 is %s with streak %d: backpressure is never a fault", e.State, e.Streak)
	}
}
