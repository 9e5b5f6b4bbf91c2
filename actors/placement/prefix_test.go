package placement

import (
	"testing"
)

func matchOf(x *PrefixIndex, blocks []uint64) prefixMatches { return x.match(blocks, nil) }

func TestPrefixIndexMatchesLeadingBlocksAndStaysBounded(t *testing.T) {
	x := NewPrefixIndex(8, nil)
	x.Record([]uint64{1, 2, 3}, 0)
	x.Record([]uint64{1, 2}, 5)
	if m := matchOf(x, []uint64{1, 2, 3, 4}); m.longest() != 3 || m.of(0) != 3 || m.of(5) != 2 || m.of(1) != 0 {
		t.Fatalf("matches %v", m)
	}
	if m := matchOf(x, []uint64{9, 2, 3}); len(m) != 0 {
		t.Fatal("a different first block matched: matches must start at the prompt's beginning")
	}
	for i := uint64(100); i < 200; i++ {
		x.Record([]uint64{i}, 1)
	}
	if _, total := x.count(); total > 8 {
		t.Fatalf("the index holds %d block hashes, over its bound of 8", total)
	}
	// A hash used again survives the turnover: it is copied into the newer generation.
	x.Record([]uint64{7}, 2)
	for i := uint64(300); i < 303; i++ {
		x.Record([]uint64{i}, 1)
		x.Record([]uint64{7}, 2)
	}
	if matchOf(x, []uint64{7}).of(2) != 1 {
		t.Fatal("a hot block hash was forgotten")
	}
	if per, _ := x.count(); per[2] != 1 {
		t.Fatalf("engine 2 holds %d hashes, want 1", per[2])
	}
}

// Past 64 engines (the bound a bit mask set), every engine is indexed: a block served by many
// engines keeps them all, sorted, and each one's depth is its own.
func TestPrefixIndexTellsAThousandEnginesApart(t *testing.T) {
	x := NewPrefixIndex(1<<16, nil)
	for i := range 1000 {
		if s := x.TakeSlot(); s != i {
			t.Fatalf("slot %d handed out as %d", i, s)
		}
	}
	for e := range 1000 {
		x.Record([]uint64{1, uint64(2 + e%7)}, e) // every engine the first block, one of 7 second blocks
	}
	x.Record([]uint64{1, 2, 3}, 999)
	m := matchOf(x, []uint64{1, 2, 3})
	if len(m) != 1000 {
		t.Fatalf("%d engines match the first block, want 1000", len(m))
	}
	for e := range 1000 {
		want := 1
		if e%7 == 0 {
			want = 2
		}
		if e == 999 {
			want = 3
		}
		if got := m.of(e); got != want {
			t.Fatalf("engine %d matches %d blocks, want %d", e, got, want)
		}
	}
	if x.TakeSlot() != 1000 {
		t.Fatal("the 1001st engine got no slot")
	}
}

// A removed engine's slot never hands its entries to the engine that gets the slot next: the
// slot is ignored at once, and handed out again only once no entry holds it — after two
// turnovers, or at once after a walk that clears it when every other slot is spent.
func TestPrefixSlotsAreClearedBeforeReuse(t *testing.T) {
	x := NewPrefixIndex(1<<10, nil)
	a, b := x.TakeSlot(), x.TakeSlot()
	if a != 0 || b != 1 {
		t.Fatalf("slots %d, %d", a, b)
	}
	x.Record([]uint64{1, 2}, a)
	x.Record([]uint64{1}, b)
	x.Retire(a)
	if m := matchOf(x, []uint64{1, 2}); m.of(a) != 0 || m.of(b) != 1 {
		t.Fatalf("after retiring %d: matches %v", a, m)
	}
	if per, _ := x.count(); per[a] != 0 {
		t.Fatalf("a retired slot still counts %d hashes", per[a])
	}
	// Fresh slots remain: the retired one waits.
	if c := x.TakeSlot(); c == a {
		t.Fatal("a retired slot was handed out while fresh ones remained")
	}
	// Every other slot spent: the retired one is cleared from every entry, then handed out.
	x.fresh = MaxIndexed
	if c := x.TakeSlot(); c != a {
		t.Fatalf("got slot %d, want the retired %d", c, a)
	}
	if m := matchOf(x, []uint64{1, 2}); m.of(a) != 0 {
		t.Fatalf("the new holder of slot %d inherited the removed engine's prefix: %v", a, m)
	}
	if x.TakeSlot() != -1 {
		t.Fatal("a slot was handed out past MaxIndexed")
	}

	// With turnovers, a retired slot becomes free without a walk.
	y := NewPrefixIndex(4, nil)
	s := y.TakeSlot()
	y.TakeSlot()
	y.Record([]uint64{9}, s)
	y.Retire(s)
	for i := uint64(100); i < 110; i++ { // several turnovers of a two-entry generation
		y.Record([]uint64{i}, 1)
	}
	y.fresh = MaxIndexed // no fresh slot: only the freed one
	if got := y.TakeSlot(); got != s || y.retired.has(s) {
		t.Fatalf("the retired slot %d was not freed by the turnovers (got %d)", s, got)
	}
}

// A block's engine set: sorted, inline up to seven engines and wide beyond, and a wide set
// copied into another map (the estimate's next generation) is never shared with it.
func TestBlockMapSetsStaySortedInlineAndWide(t *testing.T) {
	a, b := newBlockMap(0), newBlockMap(0)
	for _, s := range []int{9, 3, 7, 1, 5, 3, 11, 13, 15, 2} {
		v, _ := a.get(42)
		a.put(42, v, s)
	}
	v, _ := a.get(42)
	if v.len() != 9 || v.wide == nil {
		t.Fatalf("set %+v", v)
	}
	for i, want := range []int{1, 2, 3, 5, 7, 9, 11, 13, 15} {
		if v.at(i) != want {
			t.Fatalf("at(%d) = %d, want %d", i, v.at(i), want)
		}
	}
	b.put(42, v, 20) // copied forward, with one more
	a.remove(42, 5)
	a.remove(42, 9)
	if w, _ := a.get(42); w.wide != nil || w.len() != 7 || !w.has(7) || w.has(5) {
		t.Fatalf("after removals: %+v", w)
	}
	if w, _ := b.get(42); w.len() != 10 || !w.has(5) || !w.has(20) {
		t.Fatalf("the copy changed with the original: %+v", w)
	}
	for _, s := range []int{1, 2, 3, 7, 11, 13, 15} {
		a.remove(42, s)
	}
	if _, ok := a.get(42); ok || len(a.wide) != 0 {
		t.Fatal("an emptied set stayed in the map")
	}
}
