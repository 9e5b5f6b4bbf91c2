package tests

import (
	"fmt"
	"math/rand/v2"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/narwhal-router/narwhal/bench/sim"
	"github.com/narwhal-router/narwhal/config"
)

// A poison request — one that fails on every engine — is blamed on itself, not on the engines
// it visited; an engine that fails every request is still ejected (actors/blameboard.go).

// metricsCaughtUp waits until the Prometheus exposition (reported every second) counts n
// finished requests, so that what was recorded before them is in the scrape.
func (h *harness) metricsCaughtUp(n int) {
	h.t.Helper()
	re := regexp.MustCompile(`(?m)^narwhal_requests_total\{[^}]*\} ([0-9.e+-]+)$`)
	var got float64
	eventually(h.t, 5*time.Second, func() bool {
		got = 0
		for _, m := range re.FindAllStringSubmatch(h.scrape(), -1) {
			v, _ := strconv.ParseFloat(m[1], 64)
			got += v
		}
		return got >= float64(n)
	}, func() string { return fmt.Sprintf("the metrics count %v finished requests, want %d", got, n) })
}

// ejections is how many times the breaker of any engine of the fleet ejected it.
func (h *harness) ejections() float64 {
	n := 0.0
	for _, e := range h.fleet.Engines {
		for _, from := range []string{"admitted", "quarantined"} {
			n += h.metric(fmt.Sprintf(`narwhal_breaker_transitions_total{engine=%q,from=%q,to="ejected"}`, e.Name(), from))
		}
	}
	return n
}

func (h *harness) attributed(leg, kind string) float64 {
	return h.metric(fmt.Sprintf(`narwhal_request_attributed_failures_total{kind=%q,leg=%q}`, kind, leg))
}

// With recovery.eject_after: 1, a single counted failure would eject an engine: a poison
// request retried across every consumer ejects none of them, and its failures are counted as
// the request's.
func TestPoisonRequestRetriedAcrossEnginesEjectsNothing(t *testing.T) {
	h := start(t, setup{prefill: 2, decode: 3, engine: sim.Options{Tokens: 2}, config: configs(retries(3), timeouts(10, 0.3, 10),
		func(c *config.Config) { c.Recovery.EjectAfter = 1 })})
	poisons := []struct {
		directive, leg, kind string
		legs                 float64 // engines it fails on: three consumers, or both producers
	}{
		{"@sim:decode.status=500", "decode", "engine_status", 3},
		{"@sim:decode.hang_first_token", "decode", "first_token_timeout", 3},
		{"@sim:decode.close_after=0", "decode", "closed_early", 3},
		{"@sim:prefill.status=500", "prefill", "engine_status", 2},
	}
	for _, p := range poisons {
		expectDone(t, h.send("/v1/completions", completion("healthy", true))) // the fleet serves others
		r := h.send("/v1/completions", completion("poison "+p.directive, true))
		if r.status < 500 {
			t.Fatalf("%s: status %d: %s", p.directive, r.status, r.body)
		}
		h.expectAccess(r.id, r.status, 3, str(h.accessLine(r.id)["error_kind"]))
		// The engines show they serve other requests by committing them: healthy traffic is the
		// evidence that makes the failures the request's (actors/blameboard.go).
		i := 0
		eventually(t, 5*time.Second, func() bool {
			i++
			expectDone(t, h.send("/v1/completions", completion(fmt.Sprintf("healthy %d", i), true)))
			return h.attributed(p.leg, p.kind) >= p.legs
		}, func() string {
			return fmt.Sprintf("%s: %v failures attributed to the request, want %v", p.directive, h.attributed(p.leg, p.kind), p.legs)
		})
		for _, e := range h.engines() {
			if e.State != "admitted" || e.Streak != 0 {
				t.Fatalf("after %s: %s is %s with streak %d", p.directive, e.Name, e.State, e.Streak)
			}
		}
	}
	if n := h.ejections(); n != 0 {
		t.Fatalf("%v ejections", n)
	}
	expectDone(t, h.send("/v1/completions", completion("healthy", true)))
}

// A soak of mixed traffic with 10% poison requests: every engine stays admitted and every
// healthy request succeeds.
func TestPoisonSoakKeepsTheFleetAdmitted(t *testing.T) {
	const (
		requests    = 400
		concurrency = 4
	)
	h := start(t, setup{prefill: 2, decode: 3, engine: sim.Options{Tokens: 3}, config: configs(retries(3), timeouts(10, 0.25, 10))})
	poisons := []string{
		"@sim:decode.status=500", "@sim:decode.close_after=0", "@sim:decode.done_first",
		"@sim:decode.error_in_stream=500", "@sim:prefill.status=500", "@sim:decode.hang_first_token",
	}
	var (
		next, healthy, healthyOK, poison, poisonErr atomic.Int64
		mu                                          sync.Mutex
		failures                                    []string
		wg                                          sync.WaitGroup
	)
	// A watcher polls the breakers throughout: an ejection is seen even if it heals later.
	var seen sync.Map // "engine state" → true
	stopWatch := make(chan struct{})
	watched := make(chan struct{})
	go func() {
		defer close(watched)
		for {
			for _, e := range h.engines() {
				if e.State != "admitted" {
					seen.Store(e.Name+" "+e.State, true)
				}
			}
			select {
			case <-stopWatch:
				return
			case <-time.After(10 * time.Millisecond):
			}
		}
	}()
	began := time.Now()
	for w := 0; w < concurrency; w++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := next.Add(1); i <= requests; i = next.Add(1) {
				stream := i%2 == 0
				if i%10 == 3 { // 10% poison
					poison.Add(1)
					if r := h.send("/v1/completions", completion("poison "+poisons[rand.IntN(len(poisons))], stream)); r.status >= 500 ||
						(stream && r.status == 200 && strings.Contains(string(r.body), `data: {"error":`)) {
						poisonErr.Add(1)
					}
					continue
				}
				healthy.Add(1)
				r := h.send("/v1/completions", completion(fmt.Sprintf("healthy request %d", i), stream))
				if r.status == 200 && (!stream || strings.HasSuffix(string(r.body), "data: [DONE]\n\n")) {
					healthyOK.Add(1)
					continue
				}
				mu.Lock()
				failures = append(failures, fmt.Sprintf("%s: %d %.200s", r.id, r.status, r.body))
				mu.Unlock()
			}
		}()
	}
	wg.Wait()
	elapsed := time.Since(began)
	close(stopWatch)
	<-watched
	seen.Range(func(k, _ any) bool { t.Errorf("during the soak an engine was %s", k); return true })
	h.metricsCaughtUp(requests)
	attributed := 0.0
	for _, k := range []string{"engine_status", "closed_early", "done_before_token", "stream_error", "first_token_timeout"} {
		attributed += h.attributed("decode", k) + h.attributed("prefill", k)
	}
	t.Logf("soak: %d requests in %v, %d poison (%d failed), %d healthy, %d healthy succeeded (%.1f%%), %v ejections, %v failures attributed to requests",
		requests, elapsed.Round(time.Millisecond), poison.Load(), poisonErr.Load(), healthy.Load(), healthyOK.Load(),
		100*float64(healthyOK.Load())/float64(healthy.Load()), h.ejections(), attributed)
	if len(failures) > 0 {
		t.Fatalf("%d healthy requests failed, e.g. %s", len(failures), failures[0])
	}
	if poisonErr.Load() != poison.Load() {
		t.Fatalf("%d of %d poison requests succeeded", poison.Load()-poisonErr.Load(), poison.Load())
	}
	if n := h.ejections(); n != 0 {
		t.Fatalf("%v ejections during the soak", n)
	}
	for _, e := range h.engines() {
		if e.State != "admitted" {
			t.Fatalf("%s is %s after the soak", e.Name, e.State)
		}
	}
	if attributed < float64(poison.Load()) {
		t.Fatalf("%v failures attributed to %d poison requests", attributed, poison.Load())
	}
}

// An engine that hangs every request is still ejected after recovery.eject_after of its own
// failures (the requests themselves succeed on a retry elsewhere), and readmitted only after a
// probe succeeds once it has recovered.
func TestEngineThatHangsEveryRequestIsEjectedAndReadmittedAfterItsProbe(t *testing.T) {
	const ejectAfter = 3
	h := start(t, setup{prefill: 1, decode: 3, engine: sim.Options{Tokens: 2}, config: configs(retries(3), timeouts(10, 0.3, 10),
		func(c *config.Config) {
			c.Recovery.EjectAfter = ejectAfter
			c.Recovery.ProbeIntervalS, c.Recovery.ProbeMaxIntervalS = 0.2, 0.4
		})})
	h.inject("d0", "decode.hang_first_token", 0)
	began := time.Now()
	var firstFailure time.Time
	for i := 0; h.engine("d0").State == "admitted"; i++ {
		if i == 300 {
			t.Fatalf("d0 not ejected: %+v", h.engine("d0"))
		}
		r := h.send("/v1/completions", completion("hi", true))
		expectDone(t, r) // the retry on a healthy consumer serves it
		if firstFailure.IsZero() && h.clientLegs("d0", "decode") > 0 {
			firstFailure = time.Now()
		}
		if e := h.engine("d0"); e.State == "admitted" && e.Streak != h.clientLegs("d0", "decode") {
			// requests run one at a time: each of d0's hung legs is counted once its request succeeded elsewhere
			eventually(t, time.Second, func() bool {
				return h.engine("d0").Streak == h.clientLegs("d0", "decode") || h.engine("d0").State != "admitted"
			},
				func() string {
					return fmt.Sprintf("streak %+v after %d hung legs", h.engine("d0"), h.clientLegs("d0", "decode"))
				})
		}
	}
	ejectedAt := time.Now()
	if n := h.clientLegs("d0", "decode"); n != ejectAfter {
		t.Fatalf("ejected after %d hung client legs, want %d", n, ejectAfter)
	}
	// Failed probes keep it out.
	eventually(t, 10*time.Second, func() bool {
		if h.engine("d0").State == "admitted" {
			t.Fatalf("readmitted while hanging: %+v", h.engine("d0"))
		}
		return h.probeCount("d0", "failure") >= 2
	}, func() string { return fmt.Sprintf("want 2 failed probes: %+v", h.engine("d0")) })
	failedProbes := h.probeCount("d0", "failure")
	healedAt := time.Now()
	h.simEngine("d0").ClearFaults()
	e := h.waitState("d0", "admitted", 5*time.Second)
	readmittedAt := time.Now()
	if e.LastProbe == nil || e.LastProbe.Result != "success" || e.LastProbe.Mode != "probe" || e.LastProbe.At.Before(healedAt) {
		t.Fatalf("readmitted without a probe after it healed: %+v", e.LastProbe)
	}
	if n := h.attributed("decode", "first_token_timeout"); n != 0 {
		t.Fatalf("%v of the hung engine's failures were blamed on requests", n)
	}
	t.Logf("timeline: first hung leg +%v, ejected after %d failures +%v, %v failed probes, healed +%v, readmitted +%v (probe %v after healing)",
		firstFailure.Sub(began).Round(time.Millisecond), ejectAfter, ejectedAt.Sub(began).Round(time.Millisecond), failedProbes,
		healedAt.Sub(began).Round(time.Millisecond), readmittedAt.Sub(began).Round(time.Millisecond), e.LastProbe.At.Sub(healedAt).Round(time.Millisecond))
}

// When every consumer fails every request, there is no healthy traffic to show that the
// requests are at fault: the failures count and the fleet is ejected (then the whole-wave
// policy takes over), although each request failed the same way everywhere.
func TestFleetFailingEveryRequestIsStillEjected(t *testing.T) {
	h := start(t, setup{prefill: 1, decode: 2, engine: sim.Options{Tokens: 2}, config: configs(retries(2),
		func(c *config.Config) {
			c.Recovery.EjectAfter = 2
			c.Recovery.ProbeIntervalS, c.Recovery.ProbeMaxIntervalS = 5, 5
		})})
	for _, d := range h.fleet.ByRole(sim.RoleDecode) {
		d.InjectFault("decode.status=500", 0)
	}
	for i := 0; h.engine("d0").State == "admitted" || h.engine("d1").State == "admitted"; i++ {
		if i == 20 {
			t.Fatalf("not ejected: %+v %+v", h.engine("d0"), h.engine("d1"))
		}
		h.send("/v1/completions", completion("hi", true))
	}
	eventually(t, 3*time.Second, func() bool { return h.metric(`narwhal_wave_restarts_total{role="decode"}`) == 1 },
		func() string { return "no whole-wave restart" })
}
