package actors

import (
	"sync"
	"time"

	"github.com/narwhal-router/narwhal/config"
)

// retryBudget is Finagle's retry budget over a sliding window of one-second buckets: retries may
// add at most ratio × the requests seen in the window, plus minPerS per second of the window that
// are always allowed, so a sick fleet is not hammered by a retry storm. It is shared by every
// request supervisor; a mutex keeps it consistent (one lock per request and per retry).
type retryBudget struct {
	cfg     config.RetryBudgetRuntime
	ratio   float64
	reserve float64
	now     func() time.Time

	mu       sync.Mutex
	requests []int64
	retries  []int64
	stamp    []int64 // the second each bucket holds
}

func newRetryBudget(c config.RetryBudgetRuntime) *retryBudget {
	n := max(int(c.Window/time.Second), 1)
	return &retryBudget{
		cfg:   c,
		ratio: c.Ratio, reserve: c.MinPerS * float64(n), now: time.Now,
		requests: make([]int64, n), retries: make([]int64, n), stamp: make([]int64, n),
	}
}

// bucket returns the current bucket, clearing it if it holds an older second.
func (b *retryBudget) bucket() int {
	sec := b.now().Unix()
	i := int(sec % int64(len(b.stamp)))
	if b.stamp[i] != sec {
		b.stamp[i], b.requests[i], b.retries[i] = sec, 0, 0
	}
	return i
}

// deposit counts one admitted request.
func (b *retryBudget) deposit() {
	b.mu.Lock()
	b.requests[b.bucket()]++
	b.mu.Unlock()
}

// tryRetry takes one retry from the budget, reporting whether it was allowed.
func (b *retryBudget) tryRetry() bool {
	b.mu.Lock()
	defer b.mu.Unlock()
	cur := b.bucket()
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
