package placement

import (
	"slices"
	"sync"
	"time"

	"github.com/narwhal-router/narwhal/transport/blockkey"
)

// MaxIndexed is how many engines the prefix index can tell apart at once: a slot is 16 bits in
// a block's engine set. An engine added while every slot is held is placed without prefix
// preference.
const MaxIndexed = 1<<16 - 1

// PrefixIndex is what placement knows of the engines' prefix caches: for each prompt block
// (wire.Prompt.Blocks, chained, so a block stands for all the prompt before it), which engines
// hold it. A prompt's blocks are either keys of its token ids (transport/blockkey: the
// placement.tokens source gave the tokens) or hashes of its words (the estimate's blocks, when
// no tokens are known); blockkey.IsKey tells them apart. Two sources feed the index:
//
//   - the exact index (kvindex.go), from the KV cache events of the engines that publish them
//     (placement.kv_events): what the engine itself says it holds, keyed by its token ids;
//   - the estimate, from our own placements, for every engine: which engines recently served a
//     prompt starting with the block (under whichever blocks that prompt had). It is
//     approximate on purpose — an engine may have evicted a block the estimate still lists, or
//     hold one it forgot; placement treats a match as a likelihood, bounded by load.
//
// For a prompt of token keys, an engine whose events are live is matched on the exact index
// and the placements on it the events have not confirmed yet (pending.go), any other (no events configured, not yet received, its stream broken) on the
// estimate. For a prompt of word hashes every engine is matched on the estimate: an engine
// publishing events keeps its prefix preference when a prompt's tokens are not known.
//
// The estimate forgets in two generations: new entries go to cur; once cur holds half the
// bound it becomes old and the previous old is dropped, so the estimate stays under its bound
// and keeps roughly the most recently used half to all of it. A hit in old is copied forward,
// so hot prefixes survive the turnover. Each entry is a block hash and a slotSet: 24 bytes of
// map slot for up to seven engines (bench/README.md has the measured bytes per block).
//
// Engines come and go, so slots are handed out and taken back (takeSlot, retire). A slot taken
// back is retired at once: match ignores it and every entry rewritten drops it. Two turnovers
// later no entry can hold it any more, and it is handed out again; until then a joining engine
// gets a fresh slot, and only once all MaxIndexed are spent does one get the oldest retired
// slot after a walk that clears it from every entry. So a slot never carries a removed
// engine's entries to its successor.
type PrefixIndex struct {
	exact *ExactIndex

	mu       sync.Mutex
	half     int
	cur, old blockMap // block hash → engines (slots)

	used, retired bitset
	turnovers     uint64
	retiredAt     map[int]uint64 // the turnover count when each retired slot was retired
	free          []int          // slots no entry holds
	fresh         int            // the lowest slot never handed out

	sized   time.Time // when sizeCache was counted
	perSize []int
	total   int
}

func NewPrefixIndex(bound int, exact *ExactIndex) *PrefixIndex {
	half := max(1, bound/2)
	if exact == nil {
		exact = NewExactIndex(0)
	}
	return &PrefixIndex{exact: exact, half: half, cur: newBlockMap(min(half, 1<<12)), old: newBlockMap(0),
		retiredAt: map[int]uint64{}}
}

// match appends to dst the prompt's match per engine holding at least its first block: for
// token keys from the exact index for engines whose events are live and from the estimate for
// the others; for word hashes from the estimate for all.
func (x *PrefixIndex) match(blocks []uint64, dst prefixMatches) prefixMatches {
	if len(blocks) == 0 {
		return dst
	}
	start := len(dst)
	e := x.exact
	e.mu.RLock()
	var live bitset
	if blockkey.IsKey(blocks[0]) {
		now := e.clock()
		dst = walkMatches(dst, blocks, e.heldOf(blocks[0]), e.pendingOf(blocks[0], now), e.live.has,
			func(b uint64) (slotView, slotView) { return e.heldOf(b), e.pendingOf(b, now) })
		live = e.live
	}
	exactEnd := len(dst)
	x.mu.Lock()
	first, _ := x.sets(blocks[0])
	dst = walkMatches(dst, blocks, first, slotView{},
		func(s int) bool { return !x.retired.has(s) && !live.has(s) }, x.sets)
	x.mu.Unlock()
	e.mu.RUnlock()
	if exactEnd > start && len(dst) > exactEnd {
		slices.SortFunc(dst[start:], func(a, b slotDepth) int { return int(a.slot - b.slot) })
	}
	return dst
}

// sets are the engines the estimate has for b: cur's entry, which took old's when it was
// made (record copies a hit forward), else old's.
func (x *PrefixIndex) sets(b uint64) (slotView, slotView) {
	if v, ok := x.cur.get(b); ok {
		return v, slotView{}
	}
	v, _ := x.old.get(b)
	return v, slotView{}
}

// record notes that the engine in slot served a prompt with these leading blocks.
func (x *PrefixIndex) Record(blocks []uint64, slot int) {
	if slot < 0 || slot >= MaxIndexed || len(blocks) == 0 {
		return
	}
	if blockkey.IsKey(blocks[0]) {
		x.exact.Expect(blocks, slot) // before x.mu: match takes the exact index's lock first
	}
	x.mu.Lock()
	defer x.mu.Unlock()
	for _, b := range blocks {
		v, ok := x.cur.get(b)
		if ok && v.has(slot) {
			continue
		}
		if !ok {
			v, _ = x.old.get(b)
		}
		x.cur.put(b, x.dropRetired(v), slot)
		if x.cur.len() >= x.half {
			x.old, x.cur = x.cur, newBlockMap(min(x.half, 1<<12))
			x.turnovers++
		}
	}
}

// dropRetired is v without the slots of engines that left.
func (x *PrefixIndex) dropRetired(v slotView) slotView {
	for i := range v.len() {
		if x.retired.has(v.at(i)) {
			kept := make([]uint16, 0, v.len())
			for j := range v.len() {
				if s := v.at(j); !x.retired.has(s) {
					kept = append(kept, uint16(s))
				}
			}
			return slotView{wide: kept}
		}
	}
	return v
}

// sizes counts the distinct block hashes held per slot (the exact count for an engine whose
// events are live), for /engines and the tree dump, and the estimate's entries. Counting walks
// the whole estimate, so a count is reused for a second: admin paths only.
func (x *PrefixIndex) sizes() (per []int, total int) {
	x.mu.Lock()
	if time.Since(x.sized) > time.Second {
		x.perSize, x.total = x.count()
		x.sized = time.Now()
	}
	per, total = slices.Clone(x.perSize), x.total
	x.mu.Unlock()
	x.exact.mu.RLock()
	defer x.exact.mu.RUnlock()
	for slot, en := range x.exact.engines {
		if x.exact.live.has(slot) {
			for len(per) <= slot {
				per = append(per, 0)
			}
			per[slot] = len(en.held)
		}
	}
	return per, total
}

// heldBy is how many block hashes the index holds for the engine in slot.
func (x *PrefixIndex) HeldBy(slot int) int {
	if per, _ := x.sizes(); slot >= 0 && slot < len(per) {
		return per[slot]
	}
	return 0
}

func (x *PrefixIndex) count() (per []int, total int) {
	per = make([]int, x.fresh)
	add := func(s slotView) {
		for i := range s.len() {
			if slot := s.at(i); !x.retired.has(slot) {
				for len(per) <= slot {
					per = append(per, 0)
				}
				per[slot]++
			}
		}
	}
	for k, s := range x.cur.m { // a cur entry took old's set when it was made
		add(s.view(x.cur.wide, k))
		total++
	}
	for k, s := range x.old.m {
		if _, dup := x.cur.m[k]; !dup {
			add(s.view(x.old.wide, k))
			total++
		}
	}
	return per, total
}

// takeSlot hands out a slot for an engine joining the fleet, or -1 when all MaxIndexed are
// held. A retired slot is handed out once two turnovers have cleared it; a fresh one before
// a retired one is purged.
func (x *PrefixIndex) TakeSlot() int {
	x.mu.Lock()
	defer x.mu.Unlock()
	for slot, at := range x.retiredAt { // retired long enough: nothing holds them
		if x.turnovers >= at+2 {
			x.retired.clear(slot)
			delete(x.retiredAt, slot)
			x.free = append(x.free, slot)
		}
	}
	slot := -1
	switch {
	case len(x.free) > 0:
		slices.Sort(x.free)
		slot, x.free = x.free[0], x.free[1:]
	case x.fresh < MaxIndexed:
		slot = x.fresh
		x.fresh++
	case len(x.retiredAt) > 0:
		slot = x.purgeOldestRetired()
	default:
		return -1
	}
	x.used.set(slot)
	return slot
}

// purgeOldestRetired clears the longest-retired slot from every entry and returns it.
func (x *PrefixIndex) purgeOldestRetired() int {
	oldest := -1
	for slot, at := range x.retiredAt {
		if oldest < 0 || at < x.retiredAt[oldest] || (at == x.retiredAt[oldest] && slot < oldest) {
			oldest = slot
		}
	}
	for _, m := range []blockMap{x.cur, x.old} {
		for k, s := range m.m {
			if s.view(m.wide, k).has(oldest) {
				m.remove(k, oldest)
			}
		}
	}
	x.retired.clear(oldest)
	delete(x.retiredAt, oldest)
	return oldest
}

// retire takes back the slot of an engine that left the fleet (after its last request, so no
// placement records it again); the exact index forgets the engine too.
func (x *PrefixIndex) Retire(slot int) {
	if slot < 0 || slot >= MaxIndexed {
		return
	}
	x.mu.Lock()
	x.used.clear(slot)
	x.retired.set(slot)
	x.retiredAt[slot] = x.turnovers
	x.mu.Unlock()
	x.exact.Forget(slot)
}

// Retired says slot belongs to an engine that left and has not been handed out again.
func (x *PrefixIndex) Retired(slot int) bool {
	x.mu.Lock()
	defer x.mu.Unlock()
	return x.retired.has(slot)
}

// Matches is how many of blocks' leading blocks the index says each engine holds, by slot (an
// engine not listed holds none).
func (x *PrefixIndex) Matches(blocks []uint64) map[int]int {
	out := map[int]int{}
	for _, e := range x.match(blocks, nil) {
		out[int(e.slot)] = int(e.depth)
	}
	return out
}
