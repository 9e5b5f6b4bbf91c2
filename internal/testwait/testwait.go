// Package testwait is how Narwhal's tests wait for something to happen: a condition checked at
// once and then on every tick of a ticker, given up on at a deadline. A test never sleeps a fixed
// time hoping the thing has happened by then; it waits for it, for at most as long as it allows.
package testwait

import (
	"testing"
	"time"
)

// Tick is how often Until checks its condition.
const Tick = 5 * time.Millisecond

// Within checks cond at once and then every interval, until it holds or within has passed; it
// says whether cond held. It is for a wait whose failure the caller handles itself (tries
// something else, or fails with a message of its own).
func Within(within, every time.Duration, cond func() bool) bool {
	if cond() {
		return true
	}
	deadline := time.NewTimer(within)
	defer deadline.Stop()
	tick := time.NewTicker(every)
	defer tick.Stop()
	for {
		select {
		case <-tick.C:
			if cond() {
				return true
			}
		case <-deadline.C:
			return cond()
		}
	}
}

// Until waits, checking cond every Tick, until it holds, and returns how long that took; if it
// does not hold within, the test fails with what().
func Until(t testing.TB, within time.Duration, cond func() bool, what func() string) time.Duration {
	t.Helper()
	return UntilEvery(t, within, Tick, cond, what)
}

// UntilEvery is Until with cond checked every interval: for a condition that costs something to
// check (a process to run, a page to fetch).
func UntilEvery(t testing.TB, within, every time.Duration, cond func() bool, what func() string) time.Duration {
	t.Helper()
	start := time.Now()
	if !Within(within, every, cond) {
		t.Fatalf("not within %v: %s", within, what())
	}
	return time.Since(start)
}

// Holds checks cond at once and then every interval for the whole of within, and says whether
// it held at every check; it returns at the first check that fails. It is for a property that
// must stay true over a window the test is about (a healthy source is never reported failing
// across several of its timeouts, a stopped node stays fenced for the length of its stall): the
// window's length is the scenario, not a guess at how long something takes.
func Holds(within, every time.Duration, cond func() bool) bool {
	if !cond() {
		return false
	}
	deadline := time.NewTimer(within)
	defer deadline.Stop()
	tick := time.NewTicker(every)
	defer tick.Stop()
	for {
		select {
		case <-tick.C:
			if !cond() {
				return false
			}
		case <-deadline.C:
			return cond()
		}
	}
}
