package actors

import "testing"

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
