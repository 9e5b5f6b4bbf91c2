package actors

import (
	"math/bits"
	"sync"
)

// maxIndexed is how many engines the prefix index tracks: one bit each in a block's mask.
// Engines past it are placed without prefix preference.
const maxIndexed = 64

// prefixIndex is the router's approximate picture of the engines' prefix caches: for each
// prompt block hash (wire.Prompt.Blocks, chained, so a hash stands for all the text before it),
// which engines recently served a prompt starting with it. It forgets in two generations: new
// entries go to cur; once cur holds half the bound, it becomes old and the previous old is
// dropped, so the index stays under its bound and keeps roughly the most recently used half to
// all of it. A hit in old is copied forward, so hot prefixes survive the turnover.
//
// It is approximate on purpose: an engine may have evicted a block the index still lists, or
// hold one the index forgot. Placement treats a match as a likelihood, bounded by load.
type prefixIndex struct {
	mu       sync.Mutex
	half     int
	cur, old map[uint64]uint64 // block hash → mask of engine indexes
}

func newPrefixIndex(bound int) *prefixIndex {
	half := max(1, bound/2)
	return &prefixIndex{half: half, cur: make(map[uint64]uint64, min(half, 1<<12)), old: map[uint64]uint64{}}
}

// match fills out[i] with the number of leading blocks engine i served, and returns the
// longest match over all engines.
func (x *prefixIndex) match(blocks []uint64, out *[maxIndexed]int) int {
	if len(blocks) == 0 {
		return 0
	}
	longest := 0
	alive := ^uint64(0)
	x.mu.Lock()
	defer x.mu.Unlock()
	for i, b := range blocks {
		alive &= x.cur[b] | x.old[b]
		if alive == 0 {
			break
		}
		for m := alive; m != 0; m &= m - 1 {
			out[bits.TrailingZeros64(m)] = i + 1
		}
		longest = i + 1
	}
	return longest
}

// record notes that engine idx served a prompt with these leading blocks.
func (x *prefixIndex) record(blocks []uint64, idx int) {
	if idx < 0 || idx >= maxIndexed || len(blocks) == 0 {
		return
	}
	bit := uint64(1) << idx
	x.mu.Lock()
	defer x.mu.Unlock()
	for _, b := range blocks {
		m, ok := x.cur[b]
		if !ok {
			m = x.old[b]
		}
		x.cur[b] = m | bit
		if len(x.cur) >= x.half {
			x.old, x.cur = x.cur, make(map[uint64]uint64, min(x.half, 1<<12))
		}
	}
}

// sizes counts the distinct block hashes held per engine, for /engines and the tree dump. It
// walks the whole index: admin paths only.
func (x *prefixIndex) sizes() (per [maxIndexed]int, total int) {
	x.mu.Lock()
	defer x.mu.Unlock()
	count := func(m uint64) {
		for ; m != 0; m &= m - 1 {
			per[bits.TrailingZeros64(m)]++
		}
	}
	for k, m := range x.cur {
		count(m | x.old[k])
		total++
	}
	for k, m := range x.old {
		if _, dup := x.cur[k]; !dup {
			count(m)
			total++
		}
	}
	return per, total
}
