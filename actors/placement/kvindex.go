package placement

import (
	"strings"
	"sync"
	"time"

	"github.com/narwhal-router/narwhal/transport/blockkey"
	"github.com/narwhal-router/narwhal/transport/kvevents"
)

// ExactIndex is the engines' prefix caches as their KV cache events tell them: for each block
// key, the engines holding it (the same slots as the estimate's), fed by kvFeeds. The keys are
// the router's own (transport/blockkey), computed from the token ids each BlockStored carries,
// chained from the parent block's key and with the block's extra keys (the LoRA adapter, the
// cache_salt), exactly as a prompt's are computed from its tokens: whatever hash algorithm and
// seed an engine uses, its blocks and a prompt's meet on the same keys. The engine's own
// hashes are kept per engine only to find a stored block's parent and what a BlockRemoved
// names.
//
// It is exact as far as the events go — a block stored is indexed when its BlockStored arrives
// and forgotten with its BlockRemoved; beside it are the placements the events have not
// confirmed yet (pending.go: blocks an engine is computing for us, which it will hold) — with
// four exceptions, each of which can only make it claim less than an engine holds, never more: blocks the engine cached before its stream was
// followed (and their children, whose parent it cannot key), blocks a lost gap hid (the
// engine's entries are dropped and it falls back to the estimate until its next batch),
// events without their token ids (older vLLM), and blocks trimmed to the bound.
//
// The bound: at most maxBlocks (engine, block) pairs in all; each engine may hold its share,
// maxBlocks divided among the engines followed, and past it its oldest stores are forgotten
// first (an engine evicts its least recently used blocks, of which the oldest stored are the
// likeliest). Only blocks in GPU memory (medium GPU, or none given) are indexed: a block
// offloaded to CPU is not where a prefill finds it.
//
// Placement reads it under the read lock (PrefixIndex.match); a batch is applied under the
// write lock, whole, so a placement sees an engine's cache between two engine steps.
type ExactIndex struct {
	mu        sync.RWMutex
	maxBlocks int
	blocks    blockMap
	engines   map[int]*ExactEngine
	pairs     int
	// live are the engines whose events are live: matched on this index and what is pending.
	live bitset
	// pendCur and pendOld are the placements on live engines the events have not confirmed
	// yet (pending.go), in two generations started at pendAt and pendOldAt.
	pendCur, pendOld  blockMap
	pendAt, pendOldAt time.Time
	clock             func() time.Time
}

// ExactEngine is one followed engine's part of the index.
type ExactEngine struct {
	slot   int
	closed bool
	held   map[uint64]uint32 // block key → the stamp of its store
	keys   map[uint64]uint64 // the engine's block hash → the block's key
	order  []stampedBlock    // stores, oldest first from head; entries no longer held are skipped
	head   int
	stamp  uint32
}

type stampedBlock struct {
	key, engineHash uint64
	stamp           uint32
}

// defaultExactBlocks bounds an exact index made without a configured bound (tests).
const defaultExactBlocks = 1 << 20

func NewExactIndex(maxBlocks int) *ExactIndex {
	if maxBlocks <= 0 {
		maxBlocks = defaultExactBlocks
	}
	return &ExactIndex{maxBlocks: maxBlocks, blocks: newBlockMap(0), engines: map[int]*ExactEngine{},
		pendCur: newBlockMap(0), pendOld: newBlockMap(0), clock: time.Now}
}

// open starts the part of the engine in slot, empty and not live until its first batch.
func (e *ExactIndex) Open(slot int) *ExactEngine {
	e.mu.Lock()
	defer e.mu.Unlock()
	if old := e.engines[slot]; old != nil {
		e.dropLocked(old)
	}
	e.dropPendingLocked(slot)
	en := &ExactEngine{slot: slot, held: map[uint64]uint32{}, keys: map[uint64]uint64{}}
	e.engines[slot] = en
	return en
}

// apply applies one batch of the engine's events and makes the engine live. It reports the
// blocks stored and removed.
func (e *ExactIndex) Apply(en *ExactEngine, b kvevents.Batch) (stored, removed int) {
	e.mu.Lock()
	defer e.mu.Unlock()
	if en.closed {
		return 0, 0
	}
	for _, ev := range b.Events {
		switch ev := ev.(type) {
		case kvevents.BlockStored:
			if !inGPU(ev.Medium) {
				continue
			}
			stored += e.storeEventLocked(en, ev)
		case kvevents.BlockRemoved:
			if !inGPU(ev.Medium) {
				continue
			}
			for _, h := range ev.BlockHashes {
				if key, ok := en.keys[h]; ok {
					delete(en.keys, h)
					if e.removeLocked(en, key) {
						removed++
					}
				}
			}
		case kvevents.AllBlocksCleared:
			removed += len(en.held)
			e.clearLocked(en)
		}
	}
	e.trimLocked(en)
	e.live.set(en.slot)
	return stored, removed
}

func inGPU(medium *string) bool {
	return medium == nil || strings.EqualFold(*medium, kvevents.MediumGPU)
}

// lost drops what the index holds of the engine after events it will never have (a gap the
// replay could not fill, a broken stream): it is matched on the estimate until its next batch.
func (e *ExactIndex) Lost(en *ExactEngine) {
	e.mu.Lock()
	defer e.mu.Unlock()
	if !en.closed {
		e.clearLocked(en)
		e.live.clear(en.slot)
	}
}

// forget drops the engine in slot (it left the fleet); its feed's later batches are ignored.
func (e *ExactIndex) Forget(slot int) {
	e.mu.Lock()
	defer e.mu.Unlock()
	if en := e.engines[slot]; en != nil {
		e.dropLocked(en)
	}
}

func (e *ExactIndex) dropLocked(en *ExactEngine) {
	e.clearLocked(en)
	en.closed = true
	e.live.clear(en.slot)
	delete(e.engines, en.slot)
}

// storeEventLocked keys the blocks of one BlockStored (blockKeys) and stores them.
func (e *ExactIndex) storeEventLocked(en *ExactEngine, ev kvevents.BlockStored) (stored int) {
	for i, key := range blockKeys(en.keys, ev) {
		h := ev.BlockHashes[i]
		en.keys[h] = key
		e.confirmLocked(key, en.slot)
		if e.storeLocked(en, key, h) {
			stored++
		}
	}
	return stored
}

// blockKeys are the router's keys (transport/blockkey) of the blocks ev stores, computed from
// its token ids: each chained from the one before, the first from the parent's key (found
// through the engine's hash of it in keys), with the block's extra keys — as the engine sent
// them, or, from a version that sends none, the adapter's name on every block. None when they
// cannot be computed: no token ids for every block, or a parent the index never keyed.
func blockKeys(keys map[uint64]uint64, ev kvevents.BlockStored) []uint64 {
	n, size := len(ev.BlockHashes), ev.BlockSize
	if n == 0 || size < 1 || len(ev.TokenIDs) != n*size {
		return nil
	}
	var parent uint64
	chained := ev.ParentBlockHash != nil
	if chained {
		var ok bool
		if parent, ok = keys[*ev.ParentBlockHash]; !ok {
			return nil
		}
	}
	var adapter []string
	if ev.LoraName != nil && *ev.LoraName != "" {
		adapter = []string{*ev.LoraName}
	}
	out := make([]uint64, n)
	for i := range n {
		extra := adapter
		if ev.ExtraKeys != nil {
			extra = ev.ExtraKeys[i]
		}
		parent = blockkey.Block(parent, chained || i > 0, ev.TokenIDs[i*size:(i+1)*size], extra)
		out[i] = parent
	}
	return out
}

func (e *ExactIndex) storeLocked(en *ExactEngine, key, engineHash uint64) bool {
	if _, ok := en.held[key]; ok {
		return false
	}
	en.stamp++
	en.held[key] = en.stamp
	en.order = append(en.order, stampedBlock{key, engineHash, en.stamp})
	v, _ := e.blocks.get(key)
	e.blocks.put(key, v, en.slot)
	e.pairs++
	return true
}

func (e *ExactIndex) removeLocked(en *ExactEngine, h uint64) bool {
	if _, ok := en.held[h]; !ok {
		return false
	}
	delete(en.held, h)
	e.blocks.remove(h, en.slot)
	e.pairs--
	return true
}

func (e *ExactIndex) clearLocked(en *ExactEngine) {
	for h := range en.held {
		e.removeLocked(en, h)
	}
	clear(en.held)
	clear(en.keys)
	en.order, en.head = nil, 0
}

// share is how many blocks each engine may hold.
func (e *ExactIndex) share() int { return max(1, e.maxBlocks/max(1, len(e.engines))) }

// trimLocked forgets the engine's oldest stores past its share, and compacts its store order
// once most of it is blocks no longer held.
func (e *ExactIndex) trimLocked(en *ExactEngine) {
	limit := e.share()
	for len(en.held) > limit && en.head < len(en.order) {
		o := en.order[en.head]
		en.head++
		if st, ok := en.held[o.key]; ok && st == o.stamp {
			e.removeLocked(en, o.key)
			if en.keys[o.engineHash] == o.key {
				delete(en.keys, o.engineHash)
			}
		}
	}
	if pending := len(en.order) - en.head; pending > 2*len(en.held)+1024 {
		kept := en.order[:0]
		for _, o := range en.order[en.head:] {
			if st, ok := en.held[o.key]; ok && st == o.stamp {
				kept = append(kept, o)
			}
		}
		en.order, en.head = kept, 0
	} else if en.head > 1024 && en.head > len(en.order)/2 {
		en.order, en.head = append(en.order[:0], en.order[en.head:]...), 0
	}
}

// heldOf are the engines whose events say they hold b.
func (e *ExactIndex) heldOf(b uint64) slotView {
	v, _ := e.blocks.get(b)
	return v
}

// isLive says whether the engine in slot is matched on its events.
func (e *ExactIndex) IsLive(slot int) bool {
	e.mu.RLock()
	defer e.mu.RUnlock()
	return e.live.has(slot)
}

// held is how many blocks the index holds for en.
func (e *ExactIndex) Held(en *ExactEngine) int {
	e.mu.RLock()
	defer e.mu.RUnlock()
	return len(en.held)
}
