package sim

import (
	"errors"
	"fmt"
	"slices"
	"sync"
	"time"
)

// slidingWindowBlocks is how many blocks the second KV group keeps in the grouped
// layout, like a sliding-window attention group that only needs the window's tail.
const slidingWindowBlocks = 4

// Read failures a producer reports over the side channel.
var (
	errUnknownEngine = errors.New("unknown engine id")
	errNoPinned      = errors.New("no pinned blocks for this request id (never pinned, already read, expired or lost in a restart)")
	errBlockMismatch = errors.New("block ids differ from the ones pinned for this request id")
)

// blockTable holds the blocks a producer keeps pinned for consumers to read. Every
// lease has the same duration, so leases expire in the order they were granted and a
// FIFO is enough to find the expired ones; expiry is applied lazily on every access.
// With the capacity model on, a pin also holds the prompt's blocks in the KV cache:
// its release function gives them back, whether the pin was read, expired or dropped,
// and is called after the table's lock is released.
type blockTable struct {
	mu        sync.Mutex
	lease     time.Duration
	blockSize int
	nextID    int
	byReq     map[string]*pinned
	order     []string // request ids in pin order, for expiry; may hold read ones
	pinned    int64    // blocks currently pinned
	read      int64
	expired   int64
	dropped   int64
}

type pinned struct {
	groups  [][]int // one list per KV group; flat descriptors have one group
	grouped bool
	blocks  int
	expires time.Time
	release func() // nil without the capacity model
}

func newBlockTable(lease time.Duration, blockSize int) *blockTable {
	return &blockTable{lease: lease, blockSize: blockSize, byReq: make(map[string]*pinned)}
}

// runReleases calls the release functions of freed pins, outside the table's lock.
func runReleases(fs []func()) {
	for _, f := range fs {
		f()
	}
}

// pin allocates blocks for a prompt of promptTokens tokens under request id reqID and
// returns them, one list per KV group. release (may be nil) runs once the pin is freed.
func (t *blockTable) pin(reqID string, promptTokens int, grouped bool, now time.Time, release func()) [][]int {
	n := max((promptTokens+t.blockSize-1)/t.blockSize, 1)
	t.mu.Lock()
	freed := t.expireLocked(now)
	defer func() { runReleases(freed) }()
	defer t.mu.Unlock()
	p := &pinned{grouped: grouped, expires: now.Add(t.lease), release: release}
	p.groups = append(p.groups, t.allocLocked(n))
	if grouped {
		p.groups = append(p.groups, t.allocLocked(min(n, slidingWindowBlocks)))
	}
	for _, g := range p.groups {
		p.blocks += len(g)
	}
	t.byReq[reqID] = p
	t.order = append(t.order, reqID)
	t.pinned += int64(p.blocks)
	return p.groups
}

func (t *blockTable) allocLocked(n int) []int {
	ids := make([]int, n)
	for i := range ids {
		ids[i] = t.nextID
		t.nextID++
	}
	return ids
}

// take frees the blocks pinned for reqID if they are exactly groups, and returns how
// many there were.
func (t *blockTable) take(reqID string, groups [][]int, grouped bool, now time.Time) (int, error) {
	t.mu.Lock()
	freed := t.expireLocked(now)
	defer func() { runReleases(freed) }()
	defer t.mu.Unlock()
	p, ok := t.byReq[reqID]
	if !ok {
		return 0, errNoPinned
	}
	if p.grouped != grouped || !slices.EqualFunc(p.groups, groups, slices.Equal[[]int]) {
		return 0, fmt.Errorf("%w: pinned %v", errBlockMismatch, p.groups)
	}
	delete(t.byReq, reqID)
	t.pinned -= int64(p.blocks)
	t.read += int64(p.blocks)
	if p.release != nil {
		freed = append(freed, p.release)
	}
	return p.blocks, nil
}

// expireLocked frees the pins whose lease ran out and returns their release functions.
func (t *blockTable) expireLocked(now time.Time) (freed []func()) {
	i := 0
	for ; i < len(t.order); i++ {
		id := t.order[i]
		p, ok := t.byReq[id]
		if !ok {
			continue // read already
		}
		if now.Before(p.expires) {
			break
		}
		delete(t.byReq, id)
		t.pinned -= int64(p.blocks)
		t.expired += int64(p.blocks)
		if p.release != nil {
			freed = append(freed, p.release)
		}
	}
	if i > 0 {
		t.order = append(t.order[:0], t.order[i:]...)
	}
	return freed
}

// dropAll forgets every pinned block, as a restart does.
func (t *blockTable) dropAll() {
	t.mu.Lock()
	var freed []func()
	for _, p := range t.byReq {
		if p.release != nil {
			freed = append(freed, p.release)
		}
	}
	t.dropped += t.pinned
	t.pinned = 0
	clear(t.byReq)
	t.order = t.order[:0]
	t.mu.Unlock()
	runReleases(freed)
}

type blockCounts struct{ pinned, read, expired, dropped int64 }

func (t *blockTable) counts(now time.Time) blockCounts {
	t.mu.Lock()
	freed := t.expireLocked(now)
	defer func() { runReleases(freed) }()
	defer t.mu.Unlock()
	return blockCounts{pinned: t.pinned, read: t.read, expired: t.expired, dropped: t.dropped}
}
