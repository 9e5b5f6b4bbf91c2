package actors

import (
	"testing"
	"time"

	"github.com/narwhal-router/narwhal/config"
)

func TestBreakerEjectsAtTheNthConsecutiveFailure(t *testing.T) {
	b := admittedBreaker(recoveryWith(t, nil))
	now := time.Now()
	for i := 1; i < 3; i++ {
		if b.failure(now, "") || b.state != admitted || b.streak != i {
			t.Fatalf("after %d failures: state %s streak %d", i, b.state, b.streak)
		}
	}
	b.success()
	if b.streak != 0 {
		t.Fatal("success did not reset the streak")
	}
	b.failure(now, "")
	b.failure(now, "")
	if !b.failure(now, "p1") || b.state != ejected || b.partner != "p1" || !b.nextProbe.Equal(now.Add(time.Second)) {
		t.Fatalf("third failure: %+v", b)
	}
	if b.failure(now, "") {
		t.Fatal("an ejected engine was ejected again")
	}
}

func TestBreakerQuarantineThenAdmits(t *testing.T) {
	b := admittedBreaker(recoveryWith(t, func(r *config.Recovery) { r.FailureQuarantineS = 2 }))
	now := time.Now()
	b.failure(now, "")
	if b.state != quarantined || !b.quarantineEnds.Equal(now.Add(2*time.Second)) {
		t.Fatalf("%+v", b)
	}
	if b.quarantineOver(now.Add(time.Second)) {
		t.Fatal("quarantine ended early")
	}
	if !b.quarantineOver(now.Add(2*time.Second)) || b.state != admitted || b.streak != 1 {
		t.Fatalf("%+v", b)
	}
}

func TestBreakerProbeCadence(t *testing.T) {
	b := admittedBreaker(recoveryWith(t, nil))
	now := time.Now()
	b.eject(now, "")
	var intervals []time.Duration
	for i := 0; i < 4; i++ {
		b.probeStarted()
		b.probeFailed(now)
		intervals = append(intervals, b.nextProbe.Sub(now))
	}
	want := []time.Duration{2 * time.Second, 4 * time.Second, 4 * time.Second, 4 * time.Second}
	for i := range want {
		if intervals[i] != want[i] {
			t.Fatalf("failed-probe backoff %v, want %v", intervals, want)
		}
	}
	b.probeStarted()
	b.probeInconclusive(now)
	if b.state != ejected || b.nextProbe.Sub(now) != 4*time.Second {
		t.Fatalf("an inconclusive probe changed the cadence: %+v", b)
	}
	b.probeStarted()
	b.probeSucceeded()
	if b.state != admitted || b.streak != 0 || b.probeInterval != time.Second {
		t.Fatalf("after success: %+v", b)
	}
}

func TestRetryBudget(t *testing.T) {
	b := newRetryBudget(config.RetryBudgetRuntime{Ratio: 0.1, MinPerS: 0.5, Window: 10 * time.Second})
	now := time.Unix(1_000_000, 0)
	b.now = func() time.Time { return now }
	allowed := 0
	for b.tryRetry() {
		allowed++
	}
	if allowed != 5 { // the reserve: 0.5/s over a 10 s window
		t.Fatalf("reserve allowed %d retries, want 5", allowed)
	}
	for i := 0; i < 100; i++ {
		b.deposit()
	}
	allowed = 0
	for b.tryRetry() {
		allowed++
	}
	if allowed != 10 { // 10% of 100 requests
		t.Fatalf("ratio allowed %d more retries, want 10", allowed)
	}
	now = now.Add(11 * time.Second) // the window slid past all of it
	if !b.tryRetry() {
		t.Fatal("the reserve did not come back")
	}
}

// admittedBreaker is the breaker of an engine whose join check passed.
func admittedBreaker(cfg config.RecoveryRuntime) breaker {
	b := newBreaker(cfg)
	b.joined()
	return b
}

// A new engine's breaker is joining: out of placement, deaf to failures (none can reach it),
// until its join check admits it or ejects it, after which it is probed like any other.
func TestBreakerOfANewEngineJoinsFirst(t *testing.T) {
	b := newBreaker(recoveryWith(t, nil))
	now := time.Now()
	if b.state != joining || b.placeable() || !b.takesOut() {
		t.Fatalf("new breaker: %+v", b)
	}
	b.note("engine_status on the decode leg")
	if b.failure(now, "") || b.state != joining || b.streak != 0 {
		t.Fatalf("a failure moved a joining breaker: %+v", b)
	}
	b.joinFailed(now, "join check failed: connection refused")
	if b.state != ejected || b.ejectedBy() != "breaker" || b.cause != "join check failed: connection refused" ||
		!b.nextProbe.Equal(now.Add(b.cfg.ProbeInterval)) {
		t.Fatalf("after a failed join check: %+v", b)
	}
	c := newBreaker(recoveryWith(t, nil))
	c.joined()
	if c.state != admitted || !c.placeable() {
		t.Fatalf("after a passed join check: %+v", c)
	}
}
