package testwait

import (
	"sync/atomic"
	"testing"
	"time"
)

// A condition that comes true is seen on a tick after it does, well before the deadline; one
// that never does is given up on at the deadline, with its last check made then.
func TestWithinWaitsForTheConditionAndNoLonger(t *testing.T) {
	var n atomic.Int32
	start := time.Now()
	if !Within(10*time.Second, time.Millisecond, func() bool { return n.Add(1) >= 5 }) {
		t.Fatal("a condition true at its fifth check was given up on")
	}
	if took := time.Since(start); took > 5*time.Second {
		t.Fatalf("took %v for a condition true after five 1 ms ticks", took)
	}

	start = time.Now()
	var checks atomic.Int32
	if Within(50*time.Millisecond, 10*time.Millisecond, func() bool { checks.Add(1); return false }) {
		t.Fatal("a condition that never holds was reported to hold")
	}
	if took := time.Since(start); took < 50*time.Millisecond {
		t.Fatalf("gave up after %v, before the 50 ms deadline", took)
	}
	if checks.Load() < 2 {
		t.Fatalf("%d checks in 50 ms at a 10 ms tick", checks.Load())
	}
}

// A condition already true returns at once, without a tick.
func TestWithinReturnsAtOnceForAConditionAlreadyTrue(t *testing.T) {
	start := time.Now()
	if !Within(time.Minute, time.Hour, func() bool { return true }) {
		t.Fatal("a true condition was given up on")
	}
	if took := time.Since(start); took > time.Second {
		t.Fatalf("took %v for a condition true at once", took)
	}
}

// Holds watches the whole window for a condition that stays true, and returns at the first
// check that fails for one that does not.
func TestHoldsWatchesTheWindowAndStopsAtTheFirstFailure(t *testing.T) {
	start := time.Now()
	var checks atomic.Int32
	if !Holds(50*time.Millisecond, 10*time.Millisecond, func() bool { checks.Add(1); return true }) {
		t.Fatal("a condition true at every check was reported to fail")
	}
	if took := time.Since(start); took < 50*time.Millisecond {
		t.Fatalf("returned after %v, before the end of the 50 ms window", took)
	}
	if checks.Load() < 2 {
		t.Fatalf("%d checks in 50 ms at a 10 ms tick", checks.Load())
	}

	start = time.Now()
	var n atomic.Int32
	if Holds(time.Minute, time.Millisecond, func() bool { return n.Add(1) < 3 }) {
		t.Fatal("a condition false at its third check was reported to hold")
	}
	if took := time.Since(start); took > 30*time.Second {
		t.Fatalf("took %v to see a condition fail at its third 1 ms check", took)
	}
	if n.Load() != 3 {
		t.Fatalf("%d checks; want it to stop at the first failure, the third", n.Load())
	}
}
