package kubernetes

import (
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/narwhal-router/narwhal/internal/testwait"
	"github.com/narwhal-router/narwhal/transport/discovery/internal/sourcetest"
)

// A frozen API server (the process stopped: its connections stay open, nothing is sent on
// them, no event, no bookmark, no error) is noticed within watch_timeout_s + 5 s: the source
// reports the stall, logged and counted as a source error, while the catalog keeps the last
// set; thawed, the source lists afresh and follows changes again.
func TestFrozenAPIServerIsNoticed(t *testing.T) {
	a := startAPIServer(t)
	a.namespace(ns)
	cfg := runtimeFor(a.applyRBAC(ns))
	cfg.WatchTimeoutS = 2
	bound := time.Duration(cfg.WatchTimeoutS+1)*time.Second + 5*time.Second // the documented bound and a second's slack for a loaded machine
	var log sourcetest.LogBuffer
	cat := sourcetest.Catalog(t, newSource(t, cfg, &log), &log)
	pa := a.ready(a.pod("p-a", prefill, nil), "10.1.0.1", true)
	da := a.ready(a.pod("d-a", decode, nil), "10.1.0.2", true)
	want := strings.Join(names(da, pa), " ")
	sourcetest.WaitUntil(t, 10*time.Second, "both pods in the fleet", func() bool {
		st := cat.Status().Sources[0]
		return st.Up && strings.Join(st.Engines, " ") == want
	})
	// Healthy, the watches end at their timeout and begin again, never taken for a stall: the
	// window is the subject here (several watch timeouts and the grace), not a wait for a
	// condition.
	healthy := func() bool { st := cat.Status().Sources[0]; return st.Up && st.Errors == 0 }
	if !testwait.Holds(bound, 100*time.Millisecond, healthy) {
		t.Fatalf("a healthy API server taken for a failing one: %+v", cat.Status().Sources[0])
	}

	a.Signal(syscall.SIGSTOP)
	frozen := time.Now()
	sourcetest.WaitUntil(t, bound+5*time.Second, "the stall reported", func() bool {
		st := cat.Status().Sources[0]
		return !st.Up && strings.Contains(st.Error, ErrStalled.Error())
	})
	took := time.Since(frozen)
	st := cat.Status().Sources[0]
	if took > bound {
		t.Errorf("the stall was reported %v after the freeze; the documented bound is %v", took.Round(time.Millisecond), bound)
	}
	if strings.Join(st.Engines, " ") != want || st.Errors < 1 || st.StaleReason == "" {
		t.Fatalf("while frozen the catalog shows %+v; want the last set kept, stale, the error counted", st)
	}
	if !strings.Contains(log.String(), "engine source failing; keeping the engines it last reported") || !strings.Contains(log.String(), "past its timeout of 2s") {
		t.Errorf("the log does not tell of the stall:\n%s", log.String())
	}
	t.Logf("stall reported %v after the freeze: %s", took.Round(time.Millisecond), st.Error)

	a.Signal(syscall.SIGCONT)
	db := a.ready(a.pod("d-b", decode, nil), "10.1.0.3", true)
	want = strings.Join(names(da, db, pa), " ")
	sourcetest.WaitUntil(t, 30*time.Second, "the source back, following changes", func() bool {
		st := cat.Status().Sources[0]
		return st.Up && strings.Join(st.Engines, " ") == want
	})
	a.adminHTTP.CloseIdleConnections()
}
