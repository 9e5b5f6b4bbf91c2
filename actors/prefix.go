package actors

import (
	"math/bits"
	"sync"
)

// maxIndexed is how many engines the prefix index tracks at once: one bit each in a block's
// mask. An engine added while every bit is held by another is placed without prefix preference.
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
//
// Engines come and go, so bits are handed out and taken back (takeSlot, retire). A bit taken
// back is retired at once: match ignores it and every entry rewritten drops it. Two turnovers
// later no entry can hold it any more, and it is handed out again; an engine that needs a bit
// before then, with none other free, gets the oldest retired one after a walk that clears it
// from every entry. So a bit never carries a removed engine's entries to its successor.
type prefixIndex struct {
	mu       sync.Mutex
	half     int
	cur, old map[uint64]uint64 // block hash → mask of engine indexes

	used      uint64 // bits held by engines of the fleet
	retired   uint64 // bits of engines that left, not yet free
	turnovers uint64
	// retiredAt is the turnover count when each retired bit was retired.
	retiredAt [maxIndexed]uint64
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
	x.mu.Lock()
	defer x.mu.Unlock()
	alive := ^x.retired
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
		x.cur[b] = m&^x.retired | bit
		if len(x.cur) >= x.half {
			x.old, x.cur = x.cur, make(map[uint64]uint64, min(x.half, 1<<12))
			x.turnovers++
		}
	}
}

// sizes counts the distinct block hashes held per engine, for /engines and the tree dump. It
// walks the whole index: admin paths only.
func (x *prefixIndex) sizes() (per [maxIndexed]int, total int) {
	x.mu.Lock()
	defer x.mu.Unlock()
	count := func(m uint64) {
		for m &^= x.retired; m != 0; m &= m - 1 {
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

// takeSlot hands out a free bit for an engine joining the fleet, or -1 when all maxIndexed are
// held. A retired bit is handed out once two turnovers have cleared it, or, when nothing else
// is free, after clearing it from every entry now.
func (x *prefixIndex) takeSlot() int {
	x.mu.Lock()
	defer x.mu.Unlock()
	for r := x.retired; r != 0; r &= r - 1 { // retired long enough: nothing holds them
		if i := bits.TrailingZeros64(r); x.turnovers >= x.retiredAt[i]+2 {
			x.retired &^= 1 << i
		}
	}
	if free := ^(x.used | x.retired); free != 0 {
		i := bits.TrailingZeros64(free)
		x.used |= 1 << i
		return i
	}
	if x.retired == 0 {
		return -1
	}
	oldest := -1
	for r := x.retired; r != 0; r &= r - 1 {
		if i := bits.TrailingZeros64(r); oldest < 0 || x.retiredAt[i] < x.retiredAt[oldest] {
			oldest = i
		}
	}
	bit := uint64(1) << oldest
	for _, m := range []map[uint64]uint64{x.cur, x.old} {
		for k, v := range m {
			if v&bit != 0 {
				if v &^= bit; v == 0 {
					delete(m, k)
				} else {
					m[k] = v
				}
			}
		}
	}
	x.retired &^= bit
	x.used |= bit
	return oldest
}

// retire takes back the bit of an engine that left the fleet (after its last request, so no
// placement records it again).
func (x *prefixIndex) retire(slot int) {
	if slot < 0 || slot >= maxIndexed {
		return
	}
	x.mu.Lock()
	defer x.mu.Unlock()
	x.used &^= 1 << slot
	x.retired |= 1 << slot
	x.retiredAt[slot] = x.turnovers
}
