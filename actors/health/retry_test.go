package health

import (
	"slices"
	"testing"
	"time"

	"github.com/narwhal-router/narwhal/config"
)

func TestRetryBudget(t *testing.T) {
	b := NewRetryBudget(config.RetryBudgetRuntime{Ratio: 0.1, MinPerS: 0.5, Window: 10 * time.Second})
	now := time.Unix(1_000_000, 0)
	allowed := 0
	for b.TryRetry(now) {
		allowed++
	}
	if allowed != 5 { // the reserve: 0.5/s over a 10 s window
		t.Fatalf("reserve allowed %d retries, want 5", allowed)
	}
	for range 100 {
		b.Deposit(now)
	}
	allowed = 0
	for b.TryRetry(now) {
		allowed++
	}
	if allowed != 10 { // 10% of 100 requests
		t.Fatalf("ratio allowed %d more retries, want 10", allowed)
	}
	if b.TryRetry(now.Add(9 * time.Second)) {
		t.Fatal("a retry within the window beyond the budget")
	}
	if !b.TryRetry(now.Add(11 * time.Second)) { // the window slid past all of it
		t.Fatal("the reserve did not come back")
	}
}

func TestRetryDecide(t *testing.T) {
	now := time.Unix(1_000_000, 0)
	ok := RetryAsk{Retriable: true, Attempt: 1, MaxAttempts: 3, Deadline: now.Add(time.Second), Engine: "d0"}
	with := func(f func(*RetryAsk)) RetryAsk { a := ok; f(&a); return a }
	for _, tc := range []struct {
		name  string
		ask   RetryAsk
		empty bool // the budget has no retry left
		want  RetryVerdict
	}{
		{"a transient fault retries", ok, false, Retry},
		{"a fault the table does not retry", with(func(a *RetryAsk) { a.Retriable = false }), false, Answer},
		{"the last attempt", with(func(a *RetryAsk) { a.Attempt = 3 }), false, Answer},
		{"past the deadline", with(func(a *RetryAsk) { a.Deadline = now }), false, Answer},
		{"the budget refuses", ok, true, BudgetExhausted},
		{"no budget spent on an answer", with(func(a *RetryAsk) { a.Retriable = false }), true, Answer},
		{"a replan past max_attempts and the budget", with(func(a *RetryAsk) { a.Replan, a.Attempt = true, 3 }), true, Retry},
		{"a second replan is a retry like any", with(func(a *RetryAsk) { a.Replan, a.Replanned, a.Attempt = true, true, 3 }), false, Answer},
		{"a replan past the deadline", with(func(a *RetryAsk) { a.Replan, a.Deadline = true, now }), false, Answer},
	} {
		b := NewRetryBudget(config.RetryBudgetRuntime{Ratio: 0, MinPerS: 1, Window: time.Second})
		if tc.empty {
			b.TryRetry(now)
		}
		if got := tc.ask.Decide(now, b); got != tc.want {
			t.Errorf("%s: %v, want %v", tc.name, got, tc.want)
		}
	}
}

func TestRetrySteer(t *testing.T) {
	for _, tc := range []struct {
		name                string
		ask                 RetryAsk
		avoid, exclude      []string
		wantAvoid, wantExcl []string
	}{
		{"the failed engine is avoided", RetryAsk{Engine: "d0"}, nil, nil, []string{"d0"}, nil},
		{"once", RetryAsk{Engine: "d0"}, []string{"d0"}, nil, []string{"d0"}, nil},
		{"one that pushed back is excluded", RetryAsk{Engine: "d0", Shuns: true}, nil, nil, nil, []string{"d0"}},
		{"one about to leave placement is excluded", RetryAsk{Engine: "d0", TakesOut: true}, []string{"d1"}, nil, []string{"d1"}, []string{"d0"}},
		{"a failed decode's producer is avoided too", RetryAsk{Engine: "d0", Producer: "p0"}, nil, nil, []string{"d0", "p0"}, nil},
		{"the producer once", RetryAsk{Engine: "d0", Producer: "p0", TakesOut: true}, []string{"p0"}, nil, []string{"p0"}, []string{"d0"}},
	} {
		avoid, excl := tc.ask.Steer(tc.avoid, tc.exclude)
		if !slices.Equal(avoid, tc.wantAvoid) || !slices.Equal(excl, tc.wantExcl) {
			t.Errorf("%s: avoid %v exclude %v, want %v %v", tc.name, avoid, excl, tc.wantAvoid, tc.wantExcl)
		}
	}
}
