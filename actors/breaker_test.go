package actors

import (
	"testing"
	"time"

	"github.com/narwhal-router/narwhal/config"
)

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
