package telemetry

import (
	"bytes"
	"fmt"
	"log/slog"
	"strings"
	"testing"
	"time"
)

func TestThrottleAdmit(t *testing.T) {
	t0 := time.Unix(1_700_000_000, 0)
	now := t0
	s := newThrottleState(time.Minute, 3, func() time.Time { return now })
	type step struct {
		at         time.Duration
		key        string
		pass       bool
		suppressed int
	}
	for i, st := range []step{
		{0, "a", true, 0}, {time.Second, "a", true, 0}, {2 * time.Second, "a", true, 0},
		{3 * time.Second, "a", false, 0}, {4 * time.Second, "a", false, 0},
		{5 * time.Second, "b", true, 0}, // another key (engine) has its own window
		{time.Minute, "a", true, 2},     // a new window: the first line says what was dropped
		{time.Minute + time.Second, "a", true, 0},
	} {
		now = t0.Add(st.at)
		if pass, sup := s.admit(st.key); pass != st.pass || sup != st.suppressed {
			t.Errorf("step %d (%s at %v): pass %v suppressed %d, want %v %d", i, st.key, st.at, pass, sup, st.pass, st.suppressed)
		}
	}
	// Keys are bounded: a stream of new keys keeps at most maxThrottleKeys windows.
	for i := range 3 * maxThrottleKeys {
		s.admit(fmt.Sprint("k", i))
	}
	if n := len(s.windows); n > maxThrottleKeys {
		t.Fatalf("%d windows kept, want at most %d", n, maxThrottleKeys)
	}
}

// A hostile publisher's 6,000 restarts in a burst write burst lines, not 6,000.
func TestThrottleLogsBurstPerEngine(t *testing.T) {
	var buf bytes.Buffer
	log := Throttle(slog.New(slog.NewTextHandler(&buf, nil)), time.Hour, 5)
	for i := range 6000 {
		log.Info("KV event publisher started over", "engine", "hostile", "seq", i)
	}
	log.Info("KV event publisher started over", "engine", "honest", "seq", 1)
	if got := strings.Count(buf.String(), "engine=hostile"); got != 5 {
		t.Fatalf("%d lines for the hostile engine, want 5", got)
	}
	if !strings.Contains(buf.String(), "engine=honest") {
		t.Fatal("another engine's line was throttled with the hostile one's")
	}
}
