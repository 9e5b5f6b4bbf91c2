package placement

import "slices"

// slotSet is the set of engines (their prefix-index slots) one block hash stands for, sorted.
// Nearly every block is held by a few engines, so up to inlineSlots live in the set itself:
// 16 bytes, a map slot of the index 24 with its key, and no pointer, so that the garbage
// collector never scans the index's maps (a million entries: scanning them would cost every
// collection milliseconds, and placement allocates). A hot prefix held more widely (a system
// prompt on every engine) is marked wide and kept, sorted, in its map's wideSets under its
// block hash.
type slotSet struct {
	n   uint16 // wide when n is wideSet
	ids [inlineSlots]uint16
}

const (
	inlineSlots = 7
	wideSet     = 1<<16 - 1
)

// wideSets are the sets of more than inlineSlots engines of one map, by block hash.
type wideSets map[uint64][]uint16

// slotView is a set as read: inline, or a wide set's slice.
type slotView struct {
	set  slotSet
	wide []uint16
}

// view is s as read, w the wide sets of s's map and h its block hash.
func (s slotSet) view(w wideSets, h uint64) slotView {
	if s.n == wideSet {
		return slotView{wide: w[h]}
	}
	return slotView{set: s}
}

func (v slotView) len() int {
	if v.wide != nil {
		return len(v.wide)
	}
	return int(v.set.n)
}

// at is the i-th slot in ascending order.
func (v slotView) at(i int) int {
	if v.wide != nil {
		return int(v.wide[i])
	}
	return int(v.set.ids[i])
}

func (v slotView) has(slot int) bool {
	if v.wide != nil {
		_, ok := slices.BinarySearch(v.wide, uint16(slot))
		return ok
	}
	for i := range int(v.set.n) {
		if int(v.set.ids[i]) == slot {
			return true
		}
	}
	return false
}

// blockMap is one map of block hashes to engine sets, with its wide sets.
type blockMap struct {
	m    map[uint64]slotSet
	wide wideSets
}

func newBlockMap(size int) blockMap {
	return blockMap{m: make(map[uint64]slotSet, size), wide: wideSets{}}
}

func (b blockMap) len() int { return len(b.m) }

// get is the set of h, and whether h has one.
func (b blockMap) get(h uint64) (slotView, bool) {
	s, ok := b.m[h]
	if !ok {
		return slotView{}, false
	}
	return s.view(b.wide, h), true
}

// put makes h's set v with slot added (v may be another map's: a wide set is copied, never
// shared).
func (b blockMap) put(h uint64, v slotView, slot int) {
	id := uint16(slot)
	n := v.len()
	if !v.has(slot) {
		n++
	}
	if n <= inlineSlots {
		var s slotSet
		added := v.has(slot)
		for i := range v.len() {
			if c := uint16(v.at(i)); !added && c > id {
				s.ids[s.n], s.n, added = id, s.n+1, true
			}
			s.ids[s.n] = uint16(v.at(i))
			s.n++
		}
		if !added {
			s.ids[s.n] = id
			s.n++
		}
		delete(b.wide, h)
		b.m[h] = s
		return
	}
	all := make([]uint16, 0, n)
	for i := range v.len() {
		all = append(all, uint16(v.at(i)))
	}
	if i, found := slices.BinarySearch(all, id); !found {
		all = slices.Insert(all, i, id)
	}
	b.wide[h] = all
	b.m[h] = slotSet{n: wideSet}
}

// remove takes slot out of h's set, and h out of the map once its set is empty.
func (b blockMap) remove(h uint64, slot int) {
	v, ok := b.get(h)
	if !ok || !v.has(slot) {
		return
	}
	if v.len() == 1 {
		delete(b.m, h)
		delete(b.wide, h)
		return
	}
	rest := make([]uint16, 0, v.len()-1)
	for i := range v.len() {
		if c := v.at(i); c != slot {
			rest = append(rest, uint16(c))
		}
	}
	delete(b.wide, h)
	if len(rest) <= inlineSlots {
		var s slotSet
		s.n = uint16(copy(s.ids[:], rest))
		b.m[h] = s
		return
	}
	b.wide[h] = rest
	b.m[h] = slotSet{n: wideSet}
}

// bitset is a set of slots, sized to the highest slot it has held.
type bitset []uint64

func (b bitset) has(slot int) bool {
	w := slot >> 6
	return slot >= 0 && w < len(b) && b[w]&(1<<(slot&63)) != 0
}

func (b *bitset) set(slot int) {
	for slot>>6 >= len(*b) {
		*b = append(*b, 0)
	}
	(*b)[slot>>6] |= 1 << (slot & 63)
}

func (b bitset) clear(slot int) {
	if w := slot >> 6; slot >= 0 && w < len(b) {
		b[w] &^= 1 << (slot & 63)
	}
}

// slotDepth is one engine's prefix match: the number of the prompt's leading blocks it holds.
type slotDepth struct {
	slot  int32
	depth int32
}

// prefixMatches are a prompt's matches, one per engine holding at least its first block,
// sorted by slot.
type prefixMatches []slotDepth

// of is the match of the engine in slot (0 when it holds none of the prompt).
func (m prefixMatches) of(slot int) int {
	i, ok := slices.BinarySearchFunc(m, int32(slot), func(e slotDepth, s int32) int { return int(e.slot - s) })
	if !ok {
		return 0
	}
	return int(m[i].depth)
}

// longest is the deepest match.
func (m prefixMatches) longest() int {
	n := 0
	for _, e := range m {
		n = max(n, int(e.depth))
	}
	return n
}

// walkMatches appends to dst, for every slot of first or first2 (the sets holding blocks[0]) that
// keep accepts, how many of blocks it holds in a row from the start (sets gives the one or two
// sets holding a block), sorted by slot.
//
// It relies on what chained block hashes make true of both indexes: an engine that holds a
// block holds the blocks before it (a prompt's blocks are recorded together; an engine caches
// a block only after its parent and evicts a prompt's tail first), so the blocks an engine
// holds are a prefix and its match is found by bisection: about log₂(len(blocks)) lookups per
// distinct match length instead of one per block. A lookup in an index of a million blocks is
// a cache miss, the cost of a placement at scale (bench/README.md, "A thousand engines").
func walkMatches(dst prefixMatches, blocks []uint64, first, first2 slotView, keep func(int) bool, sets func(b uint64) (slotView, slotView)) prefixMatches {
	start := len(dst)
	for i, j := 0, 0; i < first.len() || j < first2.len(); {
		var s int
		switch {
		case j >= first2.len() || (i < first.len() && first.at(i) < first2.at(j)):
			s = first.at(i)
			i++
		case i >= first.len() || first2.at(j) < first.at(i):
			s = first2.at(j)
			j++
		default: // in both
			s = first.at(i)
			i, j = i+1, j+1
		}
		if keep(s) {
			dst = append(dst, slotDepth{slot: int32(s), depth: 1})
		}
	}
	found := dst[start:]
	if len(found) > 0 && len(blocks) > 1 {
		bisect(found, blocks, 0, len(blocks), sets)
		slices.SortFunc(found, func(a, b slotDepth) int { return int(a.slot - b.slot) })
	}
	return dst
}

// bisect sets the depth of every engine in es, each known to hold blocks[lo] and not to hold
// blocks[hi] (hi = len(blocks): past the end). It reorders es.
func bisect(es []slotDepth, blocks []uint64, lo, hi int, sets func(b uint64) (slotView, slotView)) {
	if len(es) == 0 {
		return
	}
	if hi-lo <= 1 {
		for i := range es {
			es[i].depth = int32(lo + 1)
		}
		return
	}
	mid := lo + (hi-lo)/2
	a, b := sets(blocks[mid])
	held := 0 // es[:held] hold blocks[mid]
	for i := range es {
		if s := int(es[i].slot); a.has(s) || b.has(s) {
			es[i], es[held] = es[held], es[i]
			held++
		}
	}
	bisect(es[:held], blocks, mid, hi, sets)
	bisect(es[held:], blocks, lo, mid, sets)
}
