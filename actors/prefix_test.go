package actors

import (
	"math/bits"
	"testing"
)

func TestPrefixIndexMatchesLeadingBlocksAndStaysBounded(t *testing.T) {
	x := newPrefixIndex(8)
	x.record([]uint64{1, 2, 3}, 0)
	x.record([]uint64{1, 2}, 5)
	var m [maxIndexed]int
	if longest := x.match([]uint64{1, 2, 3, 4}, &m); longest != 3 || m[0] != 3 || m[5] != 2 || m[1] != 0 {
		t.Fatalf("longest %d, matches %v", longest, m[:6])
	}
	var none [maxIndexed]int
	if x.match([]uint64{9, 2, 3}, &none) != 0 || none[0] != 0 {
		t.Fatal("a different first block matched: matches must start at the prompt's beginning")
	}
	for i := uint64(100); i < 200; i++ {
		x.record([]uint64{i}, 1)
	}
	if _, total := x.sizes(); total > 8 {
		t.Fatalf("the index holds %d block hashes, over its bound of 8", total)
	}
	// A hash used again survives the turnover: it is copied into the newer generation.
	x.record([]uint64{7}, 2)
	for i := uint64(300); i < 303; i++ {
		x.record([]uint64{i}, 1)
		x.record([]uint64{7}, 2)
	}
	var hot [maxIndexed]int
	if x.match([]uint64{7}, &hot); hot[2] != 1 {
		t.Fatal("a hot block hash was forgotten")
	}
	per, _ := x.sizes()
	if per[2] != 1 {
		t.Fatalf("engine 2 holds %d hashes, want 1", per[2])
	}
}

// A removed engine's bit never hands its entries to the engine that gets the bit next: the bit
// is ignored at once, and handed out again only once no entry holds it — after two turnovers,
// or at once after a walk that clears it when no other bit is free.
func TestPrefixSlotsAreClearedBeforeReuse(t *testing.T) {
	x := newPrefixIndex(1 << 10)
	a, b := x.takeSlot(), x.takeSlot()
	if a != 0 || b != 1 {
		t.Fatalf("slots %d, %d", a, b)
	}
	x.record([]uint64{1, 2}, a)
	x.record([]uint64{1}, b)
	x.retire(a)
	var m [maxIndexed]int
	if x.match([]uint64{1, 2}, &m); m[a] != 0 || m[b] != 1 {
		t.Fatalf("after retiring %d: matches %v", a, m[:2])
	}
	if per, _ := x.sizes(); per[a] != 0 {
		t.Fatalf("a retired bit still counts %d hashes", per[a])
	}
	// Others are free: the retired bit waits.
	if c := x.takeSlot(); c == a {
		t.Fatal("a retired bit was handed out while other bits were free")
	}
	// Every other bit taken: the retired one is cleared from every entry, then handed out.
	for x.used|x.retired != ^uint64(0) {
		x.takeSlot()
	}
	if c := x.takeSlot(); c != a {
		t.Fatalf("got slot %d, want the retired %d", c, a)
	}
	var again [maxIndexed]int
	if x.match([]uint64{1, 2}, &again); again[a] != 0 {
		t.Fatalf("the new holder of bit %d inherited the removed engine's prefix: %v", a, again[:2])
	}
	if x.takeSlot() != -1 {
		t.Fatal("a 65th slot was handed out")
	}

	// With turnovers, a retired bit becomes free without a walk.
	y := newPrefixIndex(4)
	s := y.takeSlot()
	y.record([]uint64{9}, s)
	y.retire(s)
	for i := uint64(100); i < 110; i++ { // several turnovers of a two-entry generation
		y.record([]uint64{i}, 5)
	}
	for y.used != ^uint64(1) { // hold every bit but the retired one
		y.used |= 1 << bits.TrailingZeros64(^y.used&^1)
	}
	if y.takeSlot() != s || y.retired != 0 {
		t.Fatalf("the retired bit %d was not freed by the turnovers", s)
	}
}
