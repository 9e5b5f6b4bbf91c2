package placement

import (
	"testing"

	"github.com/narwhal-router/narwhal/transport/kvevents"
)

func stored(hs ...uint64) kvevents.BlockStored {
	return kvevents.BlockStored{BlockHashes: hs, BlockSize: 16}
}

func batchOf(evs ...kvevents.Event) kvevents.Batch { return kvevents.Batch{Events: evs} }

// An engine whose events are live is matched on what it said it holds, and only that: the
// estimate's entries for it are ignored; the others keep their estimate.
func TestExactIndexReplacesTheEstimateForEnginesWithEvents(t *testing.T) {
	e := NewExactIndex(100)
	x := NewPrefixIndex(1<<10, e)
	a, b := x.TakeSlot(), x.TakeSlot()
	x.Record([]uint64{1, 2, 3}, a) // our placements say a and b served the prompt
	x.Record([]uint64{1, 2, 3}, b)
	en := e.Open(a)
	if m := matchOf(x, []uint64{1, 2, 3}); m.of(a) != 3 {
		t.Fatalf("before its first batch engine a is matched on the estimate: %v", m)
	}
	e.Apply(en, batchOf(stored(1, 2)))
	if m := matchOf(x, []uint64{1, 2, 3}); m.of(a) != 2 || m.of(b) != 3 {
		t.Fatalf("live events: a holds 2 blocks by its events, b 3 by the estimate; got %v", m)
	}
	gpu, cpu := "GPU", "CPU"
	e.Apply(en, batchOf(kvevents.BlockStored{BlockHashes: []uint64{3}, Medium: &cpu}, kvevents.BlockRemoved{BlockHashes: []uint64{2}, Medium: &cpu}))
	if m := matchOf(x, []uint64{1, 2, 3}); m.of(a) != 2 {
		t.Fatalf("blocks offloaded to CPU changed the GPU index: %v", m)
	}
	e.Apply(en, batchOf(kvevents.BlockRemoved{BlockHashes: []uint64{2}, Medium: &gpu}))
	if m := matchOf(x, []uint64{1, 2, 3}); m.of(a) != 1 {
		t.Fatalf("after BlockRemoved(2): %v", m)
	}
	e.Apply(en, batchOf(kvevents.AllBlocksCleared{}))
	if m := matchOf(x, []uint64{1, 2, 3}); m.of(a) != 0 || e.Held(en) != 0 || e.blocks.len() != 0 {
		t.Fatalf("after AllBlocksCleared: %v, %d held, %d in the index", m, e.Held(en), e.blocks.len())
	}
	// A gap lost for good: the engine's entries go, and it is matched on the estimate again.
	e.Apply(en, batchOf(stored(1)))
	e.Lost(en)
	if m := matchOf(x, []uint64{1, 2, 3}); m.of(a) != 3 || e.IsLive(a) {
		t.Fatalf("after a lost gap engine a should fall back to the estimate: %v", m)
	}
	// The engine leaves: its part is forgotten and a late batch from its feed changes nothing.
	e.Apply(en, batchOf(stored(1, 2, 3)))
	x.Retire(a)
	e.Apply(en, batchOf(stored(1, 2, 3)))
	if m := matchOf(x, []uint64{1, 2, 3}); m.of(a) != 0 || len(e.engines) != 0 || e.pairs != 0 {
		t.Fatalf("after the engine left: %v, %d engines, %d pairs", m, len(e.engines), e.pairs)
	}
}

// The exact index holds at most max_blocks pairs, shared among the engines followed; past its
// share an engine's oldest stores are forgotten first. Churn (store, remove, store) does not
// grow what it keeps per engine.
func TestExactIndexIsBoundedAndForgetsTheOldestFirst(t *testing.T) {
	e := NewExactIndex(10)
	a, b := e.Open(0), e.Open(1)
	for h := uint64(1); h <= 8; h++ {
		e.Apply(a, batchOf(stored(h)))
	}
	if e.Held(a) != 5 {
		t.Fatalf("engine a holds %d blocks, want its share of 5", e.Held(a))
	}
	for h := uint64(1); h <= 3; h++ {
		if v, _ := e.blocks.get(h); v.has(0) {
			t.Fatalf("block %d, among the oldest, was kept", h)
		}
	}
	for h := uint64(100); h < 100+20_000; h++ {
		e.Apply(b, batchOf(stored(h), kvevents.BlockRemoved{BlockHashes: []uint64{h}}))
	}
	e.Apply(b, batchOf(stored(7, 8)))
	if e.pairs > 10 || len(b.order)-b.head > 2*len(b.held)+1024 {
		t.Fatalf("%d pairs held (bound 10), %d stores remembered for %d blocks", e.pairs, len(b.order)-b.head, len(b.held))
	}
	if m, _ := e.blocks.get(8); !m.has(0) || !m.has(1) {
		t.Fatalf("block 8 is held by both engines: %+v", m)
	}
}
