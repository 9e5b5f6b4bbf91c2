package sim

import (
	"container/list"

	"github.com/narwhal-router/narwhal/bench/sim/kvwire"
)

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
	// events, when on, collects the KV events of the changes since takeEvents (kvwire.go).
	events    bool
	pending   []kvwire.Event
	blockSize int
}

var mediumGPU = kvwire.MediumGPU

// takeEvents returns the events collected since the last call.
func (c *kvCache) takeEvents() []kvwire.Event {
	ev := c.pending
	c.pending = nil
	return ev
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
	var removed []uint64
	for c.free() < need {
		b := c.lru.Remove(c.lru.Back()).(*cachedBlock)
		delete(c.byHash, b.hash)
		c.evicted++
		if c.events {
			removed = append(removed, b.hash)
		}
	}
	if len(removed) > 0 {
		c.pending = append(c.pending, kvwire.BlockRemoved{BlockHashes: removed, Medium: &mediumGPU})
	}
	c.held += need
	return blockHold{hashed: append([]uint64(nil), hashes[:hit]...), plain: need}, hit, true
}

// commit makes the computed prompt blocks hashes (beyond those h already references)
// cached: each moves from h's plain blocks to its hashed ones, unless another holder
// cached the same block first. tokens are the prompt's token ids, for the BlockStored
// events (one per run of consecutive blocks stored).
func (c *kvCache) commit(h *blockHold, hashes []uint64, tokens []uint32, keys extraKeys) {
	run, last := -1, -1 // the run of consecutive blocks stored so far: hashes[run:last+1]
	emit := func() {
		if run >= 0 && c.events {
			c.pending = append(c.pending, c.stored(hashes, tokens, keys, run, last+1))
		}
		run = -1
	}
	for i := len(h.hashed); i < len(hashes) && h.plain > 0; i++ {
		hs := hashes[i]
		if _, dup := c.byHash[hs]; dup {
			emit()
			continue
		}
		c.byHash[hs] = &cachedBlock{hash: hs, refs: 1}
		h.hashed = append(h.hashed, hs)
		h.plain--
		if run < 0 {
			run = i
		}
		last = i
	}
	emit()
}

// stored is the BlockStored event of hashes[from:to], as vLLM's BlockPool.cache_full_blocks
// writes it: the parent's hash (nil for a prompt's first block), the blocks' token ids, the
// LoRA adapter (lora_id, lora_name) and one extra_keys entry per block.
func (c *kvCache) stored(hashes []uint64, tokens []uint32, keys extraKeys, from, to int) kvwire.BlockStored {
	ev := kvwire.BlockStored{BlockHashes: append([]uint64(nil), hashes[from:to]...), BlockSize: c.blockSize, Medium: &mediumGPU}
	if from > 0 {
		parent := hashes[from-1]
		ev.ParentBlockHash = &parent
	}
	if lo, hi := from*c.blockSize, to*c.blockSize; hi <= len(tokens) {
		ev.TokenIDs = append([]uint32(nil), tokens[lo:hi]...)
	}
	if keys.lora != "" {
		id, name := keys.loraID, keys.lora
		ev.LoraID, ev.LoraName = &id, &name
	}
	for i := from; i < to; i++ {
		ev.ExtraKeys = append(ev.ExtraKeys, keys.block(i))
	}
	return ev
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

// dropCached forgets every unreferenced cached block, as a restart does: an
// AllBlocksCleared event when nothing stays cached, else BlockRemoved for what went.
func (c *kvCache) dropCached() {
	var removed []uint64
	for c.lru.Len() > 0 {
		b := c.lru.Remove(c.lru.Back()).(*cachedBlock)
		delete(c.byHash, b.hash)
		if c.events {
			removed = append(removed, b.hash)
		}
	}
	switch {
	case !c.events:
	case len(c.byHash) == 0:
		c.pending = append(c.pending, kvwire.AllBlocksCleared{})
	case len(removed) > 0:
		c.pending = append(c.pending, kvwire.BlockRemoved{BlockHashes: removed, Medium: &mediumGPU})
	}
}
