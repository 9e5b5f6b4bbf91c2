package actors

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/narwhal-router/narwhal/cluster"
	"github.com/narwhal-router/narwhal/messages"
)

// waitEngine polls the engine's snapshot until cond holds.
func waitEngine(t *testing.T, r *Router, name string, what string, cond func(state, by string) bool) {
	t.Helper()
	var e messages.EngineState
	waitWithin(t, 2*time.Second, func() string { return fmt.Sprintf("%s: %s never happened: %+v", name, what, e) }, func() bool {
		e = describeEngine(t, r, name)
		return cond(e.State, e.DecidedBy)
	})
}

func TestPeerVerdictsFollowTheLatestDecision(t *testing.T) {
	r := testRouter(t)
	now := time.Now()
	r.PeerVerdict(cluster.Verdict{Engine: "d0", State: cluster.StateEjected, Node: "b", Decided: now, Reason: "2 failures"})
	waitEngine(t, r, "d0", "a peer's ejection takes it out", func(s, by string) bool { return s == "ejected" && by == "b" })
	if r.fleet.Load().Engine("d0").Placeable.Load() {
		t.Fatal("ejected by a peer, still placeable")
	}

	// An older readmission (decided before the ejection) changes nothing; a newer one readmits.
	r.PeerVerdict(cluster.Verdict{Engine: "d0", State: cluster.StateAdmitted, Node: "c", Decided: now.Add(-time.Second)})
	r.PeerVerdict(cluster.Verdict{Engine: "d1", State: cluster.StateQuarantined, Node: "c", Decided: now, Until: now.Add(time.Minute)})
	waitEngine(t, r, "d1", "a peer's quarantine applies", func(s, _ string) bool { return s == "quarantined" })
	if e := describeEngine(t, r, "d0"); e.State != "ejected" {
		t.Fatalf("a stale readmission readmitted d0: %+v", e)
	}
	r.PeerVerdict(cluster.Verdict{Engine: "d0", State: cluster.StateAdmitted, Node: "c", Decided: now.Add(time.Second), Reason: "probe passed"})
	waitEngine(t, r, "d0", "a newer probe verdict readmits", func(s, by string) bool { return s == "admitted" && by == "c" })
}

func TestPeerAdminEjectionHoldsUntilAnOperatorReadmits(t *testing.T) {
	r := testRouter(t)
	now := time.Now()
	r.PeerVerdict(cluster.Verdict{Engine: "d0", State: cluster.StateEjected, Node: "b", Decided: now, Admin: true, Reason: "maintenance"})
	waitEngine(t, r, "d0", "the operator's ejection applies", func(s, _ string) bool { return s == "ejected" })
	if e := describeEngine(t, r, "d0"); e.EjectedBy != "admin" || e.NextProbe != nil {
		t.Fatalf("a peer's admin ejection: %+v, want ejected_by admin and no probe scheduled", e)
	}
	// A probe's word does not lift it, even newer; an operator's does.
	r.PeerVerdict(cluster.Verdict{Engine: "d0", State: cluster.StateAdmitted, Node: "c", Decided: now.Add(time.Second)})
	r.PeerVerdict(cluster.Verdict{Engine: "d1", State: cluster.StateEjected, Node: "c", Decided: now.Add(time.Second)})
	waitEngine(t, r, "d1", "a later verdict was handled", func(s, _ string) bool { return s == "ejected" })
	if e := describeEngine(t, r, "d0"); e.State != "ejected" {
		t.Fatalf("a probe verdict lifted an operator's ejection: %+v", e)
	}
	r.PeerVerdict(cluster.Verdict{Engine: "d0", State: cluster.StateAdmitted, Node: "c", Decided: now.Add(2 * time.Second), Admin: true})
	waitEngine(t, r, "d0", "the operator's readmission applies", func(s, _ string) bool { return s == "admitted" })
}

// A local decision newer than a peer's wins here: this node's own evidence is not overwritten
// by older news.
func TestLocalDecisionOutranksOlderPeerNews(t *testing.T) {
	r := testRouter(t)
	before := time.Now()
	if _, err := r.Eject(context.Background(), "d0", "local"); err != nil {
		t.Fatal(err)
	}
	r.PeerVerdict(cluster.Verdict{Engine: "d0", State: cluster.StateAdmitted, Node: "b", Decided: before, Admin: true})
	r.PeerVerdict(cluster.Verdict{Engine: "d1", State: cluster.StateEjected, Node: "b", Decided: time.Now()})
	waitEngine(t, r, "d1", "a later verdict was handled", func(s, _ string) bool { return s == "ejected" })
	if e := describeEngine(t, r, "d0"); e.State != "ejected" || e.DecidedBy != "" {
		t.Fatalf("older peer news overrode the local ejection: %+v", e)
	}
}
