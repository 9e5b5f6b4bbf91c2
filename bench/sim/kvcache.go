package sim

import "container/list"

// kvCache is the capacity model's KV cache: a fixed number of blocks, some held by
// sequences (running, or finished prefill legs whose blocks are pinned for a
// consumer), the rest free. A block that held a full prompt block keeps its hash after
// its holders let go: it stays in the prefix cache, evictable in LRU order, until a new
// allocation needs the room. Like vLLM's, the usage figure counts held blocks only;
// cached-but-unreferenced blocks count as free.
//
// kvCache has no lock of its own: the scheduler's mutex guards it.
type kvCache struct {
	capacity int
	held     int // blocks referenced by at least one holder
	byHash   map[uint64]*cachedBlock
	lru      list.List // *cachedBlock with refs == 0, most recently released first
	evicted  int64
}

type cachedBlock struct {
	hash uint64
	refs int
	elem *list.Element // in lru while refs == 0
}

// blockHold is what one holder references: hashed (prefix-cached) blocks and plain
// blocks (not yet computed, a partial last block, output, or a duplicate of a block
// someone else cached first).
type blockHold struct {
	hashed []uint64
	plain  int
}

func newKVCache(capacity int) *kvCache {
	return &kvCache{capacity: capacity, byHash: make(map[uint64]*cachedBlock)}
}

// free is the number of blocks neither held nor cached.
func (c *kvCache) free() int { return c.capacity - c.held - c.lru.Len() }

// match returns how many of hashes' leading blocks are cached.
func (c *kvCache) match(hashes []uint64) int {
	for i, h := range hashes {
		if _, ok := c.byHash[h]; !ok {
			return i
		}
	}
	return len(hashes)
}

// acquire holds total blocks for a sequence whose leading prompt blocks are hashes,
// reusing the cached ones among the first maxHit. It returns the hold and the number of
// blocks reused, or ok=false, changing nothing, when the blocks do not fit even after
// evicting every unreferenced cached block.
func (c *kvCache) acquire(hashes []uint64, maxHit, total int) (h blockHold, hit int, ok bool) {
	hit = c.match(hashes[:min(maxHit, len(hashes))])
	revive := 0 // cached blocks that become held again
	for _, hs := range hashes[:hit] {
		if c.byHash[hs].refs == 0 {
			revive++
		}
	}
	need := total - hit
	if c.held+revive+need > c.capacity {
		return blockHold{}, 0, false
	}
	for _, hs := range hashes[:hit] {
		b := c.byHash[hs]
		if b.refs == 0 {
			c.lru.Remove(b.elem)
			b.elem = nil
			c.held++
		}
		b.refs++
	}
	for c.free() < need {
		b := c.lru.Remove(c.lru.Back()).(*cachedBlock)
		delete(c.byHash, b.hash)
		c.evicted++
	}
	c.held += need
	return blockHold{hashed: append([]uint64(nil), hashes[:hit]...), plain: need}, hit, true
}

// commit makes the computed prompt blocks hashes (beyond those h already references)
// cached: each moves from h's plain blocks to its hashed ones, unless another holder
// cached the same block first.
func (c *kvCache) commit(h *blockHold, hashes []uint64) {
	for _, hs := range hashes[len(h.hashed):] {
		if h.plain == 0 {
			return
		}
		if _, dup := c.byHash[hs]; dup {
			continue
		}
		c.byHash[hs] = &cachedBlock{hash: hs, refs: 1}
		h.hashed = append(h.hashed, hs)
		h.plain--
	}
}

// release gives back every block of h; cached ones stay in the prefix cache.
func (c *kvCache) release(h *blockHold) {
	for _, hs := range h.hashed {
		b := c.byHash[hs]
		if b == nil {
			continue // evicted by a reset while held; never happens for referenced blocks
		}
		b.refs--
		if b.refs == 0 {
			b.elem = c.lru.PushFront(b)
			c.held--
		}
	}
	c.held -= h.plain
	*h = blockHold{}
}

// dropCached forgets every unreferenced cached block, as a restart does.
func (c *kvCache) dropCached() {
	for c.lru.Len() > 0 {
		b := c.lru.Remove(c.lru.Back()).(*cachedBlock)
		delete(c.byHash, b.hash)
	}
}
