package main

import (
	"fmt"
	"os"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/narwhal-router/narwhal/bench/sim"
)

// A configuration file replaced by a FIFO is refused by the reload, naming what it is, instead
// of blocking it for ever; SIGHUPs sent meanwhile are served (coalesced while one runs), and a
// SIGTERM behind them starts the drain at once: reloads run off the signal loop.
func TestReloadOfAFIFONeverHoldsBackSIGTERM(t *testing.T) {
	p := serveFleet(t, "drain_delay_s: 5")
	if err := os.Remove(p.path); err != nil {
		t.Fatal(err)
	}
	if err := syscall.Mkfifo(p.path, 0o600); err != nil {
		t.Fatal(err)
	}
	for range 3 {
		p.cmd.Process.Signal(syscall.SIGHUP)
	}
	waitFor(t, 5*time.Second, func() bool { return strings.Contains(p.log.String(), "is not a regular file (a FIFO)") },
		func() string { return "the reload did not refuse the FIFO" })

	sent := time.Now()
	p.cmd.Process.Signal(syscall.SIGTERM)
	waitFor(t, 2*time.Second, func() bool { code, _ := p.get("/readyz"); return code == 503 }, func() string {
		code, body := p.get("/readyz")
		return fmt.Sprintf("/readyz %d %s after SIGTERM behind reloads, want 503 (draining)", code, body)
	})
	t.Logf("drain began %v after SIGTERM", time.Since(sent).Round(time.Millisecond))
}

// serveFleet runs `narwhal serve` (under wrapper, if any) in front of a simulated engine pair,
// its server section on free loopback ports plus server, and waits until it is ready.
func serveFleet(t *testing.T, server string, wrapper ...string) *serveProc {
	t.Helper()
	fleet, err := sim.StartFleet(sim.FleetOptions{Prefill: 1, Decode: 1, Engine: sim.Options{Models: []string{"m"}, Tokens: 2}})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { fleet.Close() })
	path := writeFleetConfig(t, fleet, `listen: "127.0.0.1:0", admin_listen: "127.0.0.1:0", shutdown_grace_s: 1, `+server)
	p := startServeUnder(t, path, wrapper...)
	waitFor(t, 5*time.Second, func() bool { code, _ := p.get("/readyz"); return code == 200 }, func() string { return "never ready" })
	return p
}
