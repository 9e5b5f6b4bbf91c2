package placement

import (
	"strings"
	"sync"

	"github.com/narwhal-router/narwhal/transport/kvevents"
)

// ExactIndex is the engines' prefix caches as their KV cache events tell them: for each
// block hash, the engines holding it (the same slots as the estimate's), fed by kvFeeds. It is
// exact as far as the events go — a block stored is indexed when its BlockStored arrives and
// forgotten with its BlockRemoved — with three exceptions, each of which can only make it
// claim less than an engine holds, never more: blocks the engine cached before its stream was
// followed, blocks a lost gap hid (the engine's entries are dropped and it falls back to the
// estimate until its next batch), and blocks trimmed to the bound.
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
	// live are the engines whose events are live: matched on this index alone.
	live bitset
}

// ExactEngine is one followed engine's part of the index.
type ExactEngine struct {
	slot   int
	closed bool
	held   map[uint64]uint32 // block hash → the stamp of its store
	order  []stampedBlock    // stores, oldest first from head; entries no longer held are skipped
	head   int
	stamp  uint32
}

type stampedBlock struct {
	hash  uint64
	stamp uint32
}

// defaultExactBlocks bounds an exact index made without a configured bound (tests).
const defaultExactBlocks = 1 << 20

func NewExactIndex(maxBlocks int) *ExactIndex {
	if maxBlocks <= 0 {
		maxBlocks = defaultExactBlocks
	}
	return &ExactIndex{maxBlocks: maxBlocks, blocks: newBlockMap(0), engines: map[int]*ExactEngine{}}
}

// open starts the part of the engine in slot, empty and not live until its first batch.
func (e *ExactIndex) Open(slot int) *ExactEngine {
	e.mu.Lock()
	defer e.mu.Unlock()
	if old := e.engines[slot]; old != nil {
		e.dropLocked(old)
	}
	en := &ExactEngine{slot: slot, held: map[uint64]uint32{}}
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
			for _, h := range ev.BlockHashes {
				if e.storeLocked(en, h) {
					stored++
				}
			}
		case kvevents.BlockRemoved:
			if !inGPU(ev.Medium) {
				continue
			}
			for _, h := range ev.BlockHashes {
				if e.removeLocked(en, h) {
					removed++
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

func (e *ExactIndex) storeLocked(en *ExactEngine, h uint64) bool {
	if _, ok := en.held[h]; ok {
		return false
	}
	en.stamp++
	en.held[h] = en.stamp
	en.order = append(en.order, stampedBlock{h, en.stamp})
	v, _ := e.blocks.get(h)
	e.blocks.put(h, v, en.slot)
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
		if en.held[o.hash] == o.stamp {
			e.removeLocked(en, o.hash)
		}
	}
	if pending := len(en.order) - en.head; pending > 2*len(en.held)+1024 {
		kept := en.order[:0]
		for _, o := range en.order[en.head:] {
			if st, ok := en.held[o.hash]; ok && st == o.stamp {
				kept = append(kept, o)
			}
		}
		en.order, en.head = kept, 0
	} else if en.head > 1024 && en.head > len(en.order)/2 {
		en.order, en.head = append(en.order[:0], en.order[en.head:]...), 0
	}
}

func (e *ExactIndex) sets(b uint64) (slotView, slotView) {
	v, _ := e.blocks.get(b)
	return v, slotView{}
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
