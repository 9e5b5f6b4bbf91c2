package tests

import (
	"strings"
	"testing"
	"time"

	"github.com/narwhal-router/narwhal/bench/sim"
	"github.com/narwhal-router/narwhal/config"
)

func TestShutdownLetsInFlightStreamsFinishWithinTheGrace(t *testing.T) {
	h := start(t, setup{prefill: 1, decode: 1, engine: sim.Options{Tokens: 8, ITL: 60 * time.Millisecond},
		config: func(c *config.Config) { c.Server.ShutdownGraceS = 5 }})
	type result struct {
		code int
		body string
	}
	done := make(chan result, 1)
	go func() {
		resp, body := h.post("/v1/completions", `{"model":"sim-model","prompt":"x","stream":true}`)
		done <- result{resp.StatusCode, string(body)}
	}()
	eventually(t, 3*time.Second, func() bool { return h.fleet.Engine("d0").Stats().InFlight == 1 },
		func() string { return "the stream never started" })
	shut := make(chan error, 1)
	go func() { shut <- h.shutdown() }()

	// No new connections once shutdown has begun.
	eventually(t, 2*time.Second, func() bool {
		resp, err := h.client.Post(h.base+"/v1/completions", "application/json", strings.NewReader(`{}`))
		if err == nil {
			resp.Body.Close()
		}
		return err != nil
	}, func() string { return "the listener still accepts during shutdown" })

	r := <-done
	if r.code != 200 || !strings.HasSuffix(r.body, "data: [DONE]\n\n") || strings.Contains(r.body, `"error"`) {
		t.Fatalf("in-flight stream: %d %q", r.code, r.body)
	}
	if err := <-shut; err != nil {
		t.Fatal(err)
	}
}

func TestShutdownEndsStreamsPastTheGraceWithOneTerminalError(t *testing.T) {
	h := start(t, setup{prefill: 1, decode: 1, engine: sim.Options{Tokens: 100, ITL: 50 * time.Millisecond},
		config: func(c *config.Config) { c.Server.ShutdownGraceS = 0.3 }})
	done := make(chan string, 1)
	go func() {
		_, body := h.post("/v1/completions", `{"model":"sim-model","prompt":"x","stream":true}`)
		done <- string(body)
	}()
	eventually(t, 3*time.Second, func() bool { return h.fleet.Engine("d0").Stats().InFlight == 1 },
		func() string { return "the stream never started" })
	began := time.Now()
	if err := h.shutdown(); err != nil {
		t.Fatal(err)
	}
	body := <-done
	if took := time.Since(began); took > 3*time.Second {
		t.Fatalf("shutdown took %v with a 0.3 s grace", took)
	}
	if strings.Count(body, `data: {"error"`) != 1 || strings.Contains(body, "[DONE]") || !strings.Contains(body, "shutting down") {
		t.Fatalf("stream cut by shutdown: %q", body[max(0, len(body)-300):])
	}
	eventually(t, 2*time.Second, func() bool { return h.fleet.Engine("d0").Stats().Aborted == 1 },
		func() string { return "the engine never saw the abort" })
}
