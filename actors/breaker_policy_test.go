package actors

import (
	"bytes"
	"context"
	"log/slog"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/narwhal-router/narwhal/config"
	"github.com/narwhal-router/narwhal/internal/testwait"
	"github.com/narwhal-router/narwhal/messages"
	"github.com/narwhal-router/narwhal/transport/fault"
)

// logBuffer collects a router's log lines.
type logBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (l *logBuffer) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.Write(p)
}

func (l *logBuffer) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.String()
}

// loggedRouter is a router over a simulated fleet (p0, d0, d1), every engine admitted, whose
// log goes to the returned buffer.
func loggedRouter(t *testing.T, tweak func(*config.Recovery)) (*Router, *logBuffer) {
	t.Helper()
	logs := &logBuffer{}
	r, _ := simRouter(t, 2, func(c *config.Config) {
		c.Recovery.ProbeIntervalS, c.Recovery.ProbeMaxIntervalS = 60, 60
		if tweak != nil {
			tweak(&c.Recovery)
		}
	}, Options{Logger: slog.New(slog.NewTextHandler(logs, nil))})
	return r, logs
}

// waitFor polls cond until it holds, failing with what after 3 s.
func waitFor(t *testing.T, what string, cond func() bool) {
	t.Helper()
	waitWithin(t, 3*time.Second, func() string { return what }, cond)
}

// waitWithin polls cond until it holds, failing with what() once within has passed.
func waitWithin(t *testing.T, within time.Duration, what func() string, cond func() bool) {
	t.Helper()
	testwait.Until(t, within, cond, what)
}

// hungDecode is what a supervisor tells the engine's breaker of a decode leg (partnered with
// p0) that timed out waiting for its first token.
func hungDecode(r *Router, engine string) *messages.LegOutcome {
	m, ok := r.env.breakerNews(legEnd{Engine: r.fleet.Load().Engine(engine), Phase: fault.PhaseDecode, Partner: "p0",
		Fault: &fault.Fault{Kind: fault.FirstTokenTimeout, Phase: fault.PhaseDecode, Engine: engine}}, false)
	if !ok {
		panic("a first-token timeout is news for the breaker")
	}
	return &m
}

func TestReadmissionModeIsLoggedAtStartUp(t *testing.T) {
	_, logs := loggedRouter(t, nil)
	if !strings.Contains(logs.String(), `msg="readmission by inference probe (recovery.readmission: probe)"`) {
		t.Fatalf("log: %s", logs)
	}
	_, logs = loggedRouter(t, func(r *config.Recovery) { r.Readmission = config.ReadmissionHealth })
	if !strings.Contains(logs.String(), `level=WARN msg="readmission by health check (recovery.readmission: health)`) {
		t.Fatalf("log: %s", logs)
	}
}

func TestAdminEjectionSaysWhoAndWhy(t *testing.T) {
	r, logs := loggedRouter(t, nil)
	ctx := context.Background()
	if st, err := r.Eject(ctx, "d0", "disk swap"); err != nil || st != "ejected" {
		t.Fatalf("eject: %s %v", st, err)
	}
	if !strings.Contains(logs.String(), `msg="engine breaker" engine=d0 from=admitted to=ejected streak=0 by=admin reason="disk swap"`) {
		t.Fatalf("log: %s", logs)
	}
	e := describeEngine(t, r, "d0")
	if e.EjectedBy != "admin" || e.EjectReason != "disk swap" || e.NextProbe != nil {
		t.Fatalf("engine: %+v", e)
	}
	tree, err := r.Tree(ctx)
	if err != nil || !strings.Contains(tree.Text(), `d0 [engine] role=decode state=ejected source=file streak=0 reserved=prefill:0,decode:0 ejected_by=admin reason="disk swap"`) {
		t.Fatalf("tree: %v %s", err, tree.Text())
	}
	// The whole-wave policy leaves an operator's ejection alone: d1 failing too restarts nothing.
	r.root.Send(pidOf(r.fleet.Load().Engine("d1")), hungDecode(r, "d1"))
	r.root.Send(pidOf(r.fleet.Load().Engine("d1")), hungDecode(r, "d1"))
	r.root.Send(pidOf(r.fleet.Load().Engine("d1")), hungDecode(r, "d1"))
	// (d1 is probed back in at once — its simulator is healthy — so its ejection is read from the log.)
	waitFor(t, "d1 not ejected", func() bool { return strings.Contains(logs.String(), "engine=d1 from=admitted to=ejected") })
	if e := describeEngine(t, r, "d0"); e.Restarts != 0 || e.State != "ejected" {
		t.Fatalf("the admin-ejected engine was restarted or probed: %+v", e)
	}
	// An admin readmission of an operator's ejection needs no probe.
	if st, err := r.Readmit(ctx, "d0", false); err != nil || st != "admitted" {
		t.Fatalf("readmit: %s %v", st, err)
	}
	if !strings.Contains(logs.String(), `msg="engine readmitted by admin" engine=d0 from=ejected force=false`) {
		t.Fatalf("log: %s", logs)
	}
	if e := describeEngine(t, r, "d0"); e.EjectedBy != "" || e.EjectReason != "" || e.LastProbe != nil {
		t.Fatalf("after readmission: %+v", e)
	}
}

func TestWholeWaveRestartIsLoggedWithItsEnginesAndFailures(t *testing.T) {
	r, logs := loggedRouter(t, func(r *config.Recovery) { r.EjectAfter = 2 })
	for _, name := range []string{"d0", "d1"} {
		r.root.Send(pidOf(r.fleet.Load().Engine(name)), hungDecode(r, name))
		r.root.Send(pidOf(r.fleet.Load().Engine(name)), hungDecode(r, name))
	}
	want := `msg="every engine of a role is ejected: restarting the wave and probing it" role=decode engines="[d0 d1]" ` +
		`failures="[d0: first_token_timeout on the decode leg (partner p0); first_token_timeout on the decode leg (partner p0) ` +
		`d1: first_token_timeout on the decode leg (partner p0); first_token_timeout on the decode leg (partner p0)]"`
	waitFor(t, "no wave log line", func() bool { return strings.Contains(logs.String(), "restarting the wave") })
	if !strings.Contains(logs.String(), want) {
		t.Fatalf("log:\n%s\nwant a line with\n%s", logs, want)
	}
}

// The engine actor publishes what its next counted failure would do, so that a supervisor
// retrying after a failure can keep off an engine about to leave placement.
func TestEnginePublishesTheConsequenceOfItsNextFailure(t *testing.T) {
	r, _ := loggedRouter(t, func(r *config.Recovery) { r.EjectAfter = 3 })
	d0 := r.fleet.Load().Engine("d0")
	if d0.TakesOut.Load() {
		t.Fatal("a fresh engine's next failure takes it out with eject_after 3")
	}
	r.root.Send(pidOf(d0), hungDecode(r, "d0"))
	waitFor(t, "streak 1", func() bool { return describeEngine(t, r, "d0").Streak == 1 })
	if d0.TakesOut.Load() {
		t.Fatal("streak 1 of 3: the next failure does not eject")
	}
	r.root.Send(pidOf(d0), hungDecode(r, "d0"))
	waitFor(t, "streak 2", func() bool { return describeEngine(t, r, "d0").Streak == 2 })
	if !d0.TakesOut.Load() {
		t.Fatal("streak 2 of 3: the next failure ejects")
	}
	r.root.Send(pidOf(d0), &messages.LegOutcome{}) // a success
	waitFor(t, "streak reset", func() bool { return describeEngine(t, r, "d0").Streak == 0 })
	if d0.TakesOut.Load() {
		t.Fatal("after a success the next failure does not eject")
	}

	q, _ := loggedRouter(t, func(r *config.Recovery) { r.FailureQuarantineS = 1 })
	if !q.fleet.Load().Engine("d0").TakesOut.Load() {
		t.Fatal("with failure_quarantine_s every counted failure takes the engine out")
	}
}
