package actors

import (
	"context"
	"testing"

	"github.com/narwhal-router/narwhal/config"
	"github.com/narwhal-router/narwhal/messages"
	"github.com/narwhal-router/narwhal/transport/fault"
)

// testRouter is a router over a simulated fleet, p0, d0, d1 and d2 (three consumers: two
// ejected are no whole-wave restart), every engine admitted.
func testRouter(t *testing.T) *Router {
	t.Helper()
	r, _ := simRouter(t, 3, func(c *config.Config) { c.Recovery.ProbeIntervalS, c.Recovery.ProbeMaxIntervalS = 60, 60 }, Options{})
	return r
}

func describeEngine(t *testing.T, r *Router, name string) messages.EngineState {
	t.Helper()
	es, err := r.Engines(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	for _, e := range es {
		if e.Name == name {
			return e
		}
	}
	t.Fatalf("no engine %s", name)
	return messages.EngineState{}
}

// A message the engine actor cannot handle makes it panic; its supervisor restarts it, and the
// breaker comes through the restart unchanged (the reservations live in the view).
func TestEngineActorRestartKeepsBreakerStateAndReservations(t *testing.T) {
	r := testRouter(t)
	d0 := r.fleet.Load().Engine("d0")
	if !d0.Reserve(fault.PhaseDecode) {
		t.Fatal("no decode slot on a fresh engine")
	}
	if _, err := r.Eject(context.Background(), "d0", "test"); err != nil {
		t.Fatal(err)
	}

	r.root.Send(pidOf(d0), (*messages.LegOutcome)(nil)) // a malformed message: the actor panics

	waitFor(t, "the engine actor was not restarted", func() bool { return describeEngine(t, r, "d0").Restarts != 0 })
	e := describeEngine(t, r, "d0")
	if e.State != "ejected" || e.Reserved.Decode != 1 || e.EjectedAt == nil || e.Restarts != 1 {
		t.Fatalf("state lost in the restart: %+v", e)
	}
	if d0.Placeable.Load() || d0.Load() != 1 {
		t.Fatalf("placement view lost in the restart: placeable=%v load=%d", d0.Placeable.Load(), d0.Load())
	}
	// The restarted actor still serves its protocol.
	if _, err := r.Readmit(context.Background(), "d0", true); err != nil {
		t.Fatal(err)
	}
	if e := describeEngine(t, r, "d0"); e.State != "admitted" {
		t.Fatalf("after a forced readmission: %+v", e)
	}
}
