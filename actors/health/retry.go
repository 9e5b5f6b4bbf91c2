package health

import (
	"slices"
	"sync"
	"time"

	"github.com/narwhal-router/narwhal/config"
)

// RetryAsk is what the retry decision weighs of an attempt that failed before commit.
type RetryAsk struct {
	// Retriable says the fault table retries the fault (transient, before visible output).
	Retriable bool
	// Attempt is the attempt that failed (1 for the first); MaxAttempts is
	// recovery.max_attempts.
	Attempt, MaxAttempts int
	// Deadline is the request's.
	Deadline time.Time
	// Engine is the engine the fault is about. Shuns says the fault table keeps a retry off it
	// (it pushed back: 429/503); TakesOut that its breaker will take it out once the failure is
	// counted (a quarantine, or the failure that completes the ejection streak), as the engine
	// actor publishes it.
	Engine   string
	Shuns    bool
	TakesOut bool
	// Producer is the attempt's producer when its decode leg failed ("" otherwise): the decode
	// may have failed reading the producer's handoff.
	Producer string
	// Replan says the attempt was planned on what the router has learned to be wrong since
	// (the fault table's Replan: a producer's engine id that changed); Replanned that the
	// request already had its one replanned attempt.
	Replan, Replanned bool
}

// RetryVerdict is what becomes of a failed attempt.
type RetryVerdict uint8

const (
	// Answer: no retry, the client gets the fault.
	Answer RetryVerdict = iota
	// Retry: a fresh attempt, steered by Steer.
	Retry
	// BudgetExhausted: a retry the rules allow, refused by the retry budget; the client gets the
	// fault.
	BudgetExhausted
)

// Decide says whether the request tries again: only for a fault the table retries, within
// recovery.max_attempts and the request's deadline (at now), and only if the budget grants
// it (a retry so granted is spent from the budget). A request's first replanned attempt is
// tried again within the deadline alone: nothing it tried could have worked, and it costs no
// engine anything a retry storm would.
func (a RetryAsk) Decide(now time.Time, budget *RetryBudget) RetryVerdict {
	switch {
	case !now.Before(a.Deadline):
		return Answer
	case a.Replan && !a.Replanned:
		return Retry
	case !a.Retriable || a.Attempt >= a.MaxAttempts:
		return Answer
	case !budget.TryRetry(now):
		return BudgetExhausted
	}
	return Retry
}

// Steer is where the retry goes, as the request's avoid list (engines tried last) and exclude
// list (engines never tried again) after the failure: the failed engine is excluded when it
// pushed back or is about to leave placement, avoided otherwise; a failed decode's producer is
// avoided too, so another pair is preferred.
func (a RetryAsk) Steer(avoid, exclude []string) ([]string, []string) {
	switch {
	case a.Shuns, a.TakesOut:
		exclude = append(exclude, a.Engine)
	case !slices.Contains(avoid, a.Engine):
		avoid = append(avoid, a.Engine)
	}
	if a.Producer != "" && !slices.Contains(avoid, a.Producer) {
		avoid = append(avoid, a.Producer)
	}
	return avoid, exclude
}

// RetryBudget is Finagle's retry budget over a sliding window of one-second buckets: retries may
// add at most ratio × the requests seen in the window, plus min_per_s per second of the window
// that are always allowed, so a sick fleet is not hammered by a retry storm. It is shared by
// every request supervisor (each a writer, through Deposit and TryRetry); a mutex keeps it
// consistent (one lock per request and per retry). The clock is passed in.
type RetryBudget struct {
	cfg     config.RetryBudgetRuntime
	ratio   float64
	reserve float64

	mu       sync.Mutex
	requests []int64
	retries  []int64
	stamp    []int64 // the second each bucket holds
}

// NewRetryBudget is an empty budget under c (recovery.retry_budget).
func NewRetryBudget(c config.RetryBudgetRuntime) *RetryBudget {
	n := max(int(c.Window/time.Second), 1)
	return &RetryBudget{
		cfg:   c,
		ratio: c.Ratio, reserve: c.MinPerS * float64(n),
		requests: make([]int64, n), retries: make([]int64, n), stamp: make([]int64, n),
	}
}

// Config is the configuration the budget was made with: a reload that keeps it keeps the
// budget and the history it counts.
func (b *RetryBudget) Config() config.RetryBudgetRuntime { return b.cfg }

// bucket returns the bucket of now's second, clearing it if it holds an older second.
func (b *RetryBudget) bucket(now time.Time) int {
	sec := now.Unix()
	i := int(sec % int64(len(b.stamp)))
	if b.stamp[i] != sec {
		b.stamp[i], b.requests[i], b.retries[i] = sec, 0, 0
	}
	return i
}

// Deposit counts one admitted request.
func (b *RetryBudget) Deposit(now time.Time) {
	b.mu.Lock()
	b.requests[b.bucket(now)]++
	b.mu.Unlock()
}

// TryRetry takes one retry from the budget, reporting whether it was allowed.
func (b *RetryBudget) TryRetry(now time.Time) bool {
	b.mu.Lock()
	defer b.mu.Unlock()
	cur := b.bucket(now)
	oldest := b.stamp[cur] - int64(len(b.stamp)) + 1
	var reqs, rets int64
	for i := range b.stamp {
		if b.stamp[i] >= oldest {
			reqs += b.requests[i]
			rets += b.retries[i]
		}
	}
	if float64(rets+1) > b.ratio*float64(reqs)+b.reserve {
		return false
	}
	b.retries[cur]++
	return true
}
