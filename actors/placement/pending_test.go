package placement

import (
	"testing"
	"time"
)

// liveEngines is a prefix index whose exact index follows engines a and b (both live: a first
// batch applied), its clock at *now.
func liveEngines(t *testing.T, now *time.Time) (x *PrefixIndex, e *ExactIndex, a, b int, ea *ExactEngine) {
	t.Helper()
	e = NewExactIndex(1 << 10)
	e.clock = func() time.Time { return *now }
	x = NewPrefixIndex(1<<10, e)
	a, b = x.TakeSlot(), x.TakeSlot()
	ea = e.Open(a)
	e.Apply(ea, batchOf())
	e.Apply(e.Open(b), batchOf())
	return x, e, a, b, ea
}

// A prompt placed on an engine with live events is matched there before the engine has
// computed it and said so: the requests sharing its prefix follow it instead of spreading over
// engines that would each compute a copy. Once the engine's events speak for the blocks, they
// alone say: a block evicted after its store is no longer matched.
func TestPlacementIsPendingUntilTheEventsConfirmIt(t *testing.T) {
	now := time.Unix(1000, 0)
	x, e, a, b, ea := liveEngines(t, &now)
	prompt := keysOf(1, 2, 3)
	if m := matchOf(x, prompt); m.longest() != 0 {
		t.Fatalf("nothing placed, nothing stored: %v", m)
	}
	x.Record(prompt, a)
	if m := matchOf(x, prompt); m.of(a) != 3 || m.of(b) != 0 {
		t.Fatalf("placed on a, not yet stored: want a matched on 3 blocks and b on none, got %v", m)
	}
	const seed = 7919
	e.Apply(ea, batchOf(storedBy(seed, 0, 1, 2, 3)))
	if m := matchOf(x, prompt); m.of(a) != 3 {
		t.Fatalf("stored: %v", m)
	}
	e.Apply(ea, batchOf(removedBy(seed, 3, 2)))
	if m := matchOf(x, prompt); m.of(a) != 1 {
		t.Fatalf("blocks 2 and 3 evicted after their store: want a matched on 1 block, got %v", m)
	}
	// Placed again: only what a does not hold is pending, so an eviction of what it held
	// is seen at once.
	x.Record(prompt, a)
	if m := matchOf(x, prompt); m.of(a) != 3 {
		t.Fatalf("placed again: %v", m)
	}
	e.Apply(ea, batchOf(removedBy(seed, 1)))
	if m := matchOf(x, prompt); m.of(a) != 0 {
		t.Fatalf("block 1, which a held when placed, evicted: want no match on a, got %v", m)
	}
}

// A placement the events never confirm (the request failed before its prefill) stays pending
// for pendingTTL at least, and is forgotten after twice that, whether placements go on or not.
func TestPendingPlacementExpires(t *testing.T) {
	start := time.Unix(1000, 0)
	now := start
	x, _, a, _, _ := liveEngines(t, &now)
	prompt := keysOf(4, 5)
	x.Record(keysOf(8), a)
	now = now.Add(pendingTTL - time.Millisecond)
	x.Record(prompt, a) // the last entry of the first generation
	now = now.Add(pendingTTL / 2)
	x.Record(keysOf(9), a) // another placement turns the generations over
	if m := matchOf(x, prompt); m.of(a) != 2 {
		t.Fatalf("half the TTL after the placement: want it still pending, got %v", m)
	}
	now = start.Add(2 * pendingTTL)
	x.Record(keysOf(10), a)
	if m := matchOf(x, prompt); m.of(a) != 0 {
		t.Fatalf("twice the TTL after its generation started: want the placement forgotten, got %v", m)
	}
	x.Record(prompt, a)
	now = now.Add(2 * pendingTTL)
	if m := matchOf(x, prompt); m.of(a) != 0 {
		t.Fatalf("twice the TTL without another placement: want nothing pending, got %v", m)
	}
}

// An engine that joins again (its part of the exact index opened afresh) has nothing pending
// from before.
func TestReopenedEngineHasNothingPending(t *testing.T) {
	now := time.Unix(1000, 0)
	x, e, a, _, _ := liveEngines(t, &now)
	prompt := keysOf(6, 7)
	x.Record(prompt, a)
	e.Apply(e.Open(a), batchOf())
	if m := matchOf(x, prompt); m.of(a) != 0 {
		t.Fatalf("reopened: %v", m)
	}
}
