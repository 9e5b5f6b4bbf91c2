package actors

import "slices"

// slotSet is the set of engines (their prefix-index slots) one block hash stands for, sorted.
// Nearly every block is held by one to three engines, so up to three live inline and the set
// is 16 bytes, a map slot of the index 24 with its key; a hot prefix held more widely (a
// system prompt on every engine) moves to a sorted slice of its own. Sets are values: with
// and without return the changed set and never write a slice another copy may share.
type slotSet struct {
	n      uint16
	inline [3]uint16
	more   *[]uint16 // every slot, sorted, once n > len(inline)
}

func (s slotSet) len() int { return int(s.n) }

// at is the i-th slot in ascending order.
func (s slotSet) at(i int) int {
	if s.more != nil {
		return int((*s.more)[i])
	}
	return int(s.inline[i])
}

func (s slotSet) has(slot int) bool {
	if s.more != nil {
		_, ok := slices.BinarySearch(*s.more, uint16(slot))
		return ok
	}
	for i := range int(s.n) {
		if int(s.inline[i]) == slot {
			return true
		}
	}
	return false
}

// with returns s with slot added.
func (s slotSet) with(slot int) slotSet {
	if s.has(slot) {
		return s
	}
	id := uint16(slot)
	if s.more == nil && int(s.n) < len(s.inline) {
		i := int(s.n)
		for i > 0 && s.inline[i-1] > id {
			s.inline[i] = s.inline[i-1]
			i--
		}
		s.inline[i] = id
		s.n++
		return s
	}
	var all []uint16
	if s.more != nil {
		all = make([]uint16, 0, len(*s.more)+1)
		all = append(all, *s.more...)
	} else {
		all = append(make([]uint16, 0, len(s.inline)+1), s.inline[:]...)
	}
	i, _ := slices.BinarySearch(all, id)
	all = slices.Insert(all, i, id)
	return slotSet{n: uint16(len(all)), more: &all}
}

// without returns s with slot removed.
func (s slotSet) without(slot int) slotSet {
	if !s.has(slot) {
		return s
	}
	id := uint16(slot)
	if s.more == nil {
		out := slotSet{}
		for i := range int(s.n) {
			if s.inline[i] != id {
				out.inline[out.n] = s.inline[i]
				out.n++
			}
		}
		return out
	}
	rest := make([]uint16, 0, len(*s.more)-1)
	for _, v := range *s.more {
		if v != id {
			rest = append(rest, v)
		}
	}
	if len(rest) <= len(s.inline) {
		out := slotSet{n: uint16(len(rest))}
		copy(out.inline[:], rest)
		return out
	}
	return slotSet{n: uint16(len(rest)), more: &rest}
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

// walkMatches appends to dst, for every slot of first or first2 (the sets holding blocks[0]) that keep
// accepts, how many of blocks it holds in a row from the start (sets gives the one or two sets
// holding a block). dst stays sorted by slot. Each
// block after the first costs one lookup, and a set test per engine still matching.
func walkMatches(dst prefixMatches, blocks []uint64, first, first2 slotSet, keep func(int) bool, sets func(b uint64) (slotSet, slotSet)) prefixMatches {
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
	for d := 1; d < len(blocks); d++ {
		advanced := false
		a, b := sets(blocks[d])
		if a.len()+b.len() == 0 {
			break
		}
		for i := range found {
			if s := int(found[i].slot); int(found[i].depth) == d && (a.has(s) || b.has(s)) {
				found[i].depth = int32(d + 1)
				advanced = true
			}
		}
		if !advanced {
			break
		}
	}
	return dst
}
