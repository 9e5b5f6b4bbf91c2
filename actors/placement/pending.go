package placement

import "time"

// Placements the events have not confirmed yet. An engine whose events are live is matched on
// what its events say it holds, but a prompt placed on it is stored, and its BlockStored sent,
// only once the engine has computed it: a prefill later, seconds behind a queue under load.
// Matched on the events alone, the next requests sharing that prefix would find no engine
// holding it and go wherever load says, each engine they land on computing the prefix again
// and caching a copy — with caches that overflow, copies that evict one another. So a prompt
// placed on a followed engine is pending there for the blocks the engine is not known to hold,
// and the engine is matched on its events and its pending blocks together, as the estimate
// would match it on our placements. A pending block is dropped when the engine's BlockStored
// for it arrives (from then on the events say whether it is held), and otherwise expires after
// pendingTTL to twice that: a request that failed or was cancelled before its prefill, or blocks
// the engine stored without their token ids.

// pendingTTL is how long, at least, a placement stays pending without its events: longer than
// a prefill waits in an engine's queue under load, so that a placement is not forgotten before
// it is computed.
const pendingTTL = 10 * time.Second

// minPendingBlocks is the least pending entries a generation may hold before it turns over
// early; the bound is otherwise an eighth of the exact index's (engine, block) pairs.
const minPendingBlocks = 1 << 12

// Expect notes that the engine in slot was given a prompt starting with blocks (token keys):
// those it is not known to hold are pending there until its events confirm them. An engine
// not followed has nothing pending: it is matched on the estimate.
func (e *ExactIndex) Expect(blocks []uint64, slot int) {
	e.mu.Lock()
	defer e.mu.Unlock()
	en := e.engines[slot]
	if en == nil || en.closed {
		return
	}
	now := e.clock()
	e.turnPendingLocked(now)
	for _, b := range blocks {
		if _, held := en.held[b]; held {
			continue
		}
		v, ok := e.pendCur.get(b)
		if ok && v.has(slot) {
			continue
		}
		if !ok && now.Sub(e.pendOldAt) < 2*pendingTTL {
			v, _ = e.pendOld.get(b) // taken forward, as the estimate takes a hit in its old half
		}
		e.pendCur.put(b, v, slot)
	}
}

// turnPendingLocked starts a new generation of pending blocks once the current one is
// pendingTTL old or full, the current one becoming the old one and the old one dropped. An
// entry is made in a generation less than pendingTTL old (the turn comes first), and a
// generation is read for twice pendingTTL from its start: a placement stays pending for
// pendingTTL at least and twice that at most.
func (e *ExactIndex) turnPendingLocked(now time.Time) {
	age := now.Sub(e.pendAt)
	switch {
	case age >= 2*pendingTTL:
		e.pendOld, e.pendCur, e.pendOldAt, e.pendAt = newBlockMap(0), newBlockMap(0), now, now
	case age >= pendingTTL || e.pendCur.len() >= max(minPendingBlocks, e.maxBlocks/8):
		e.pendOld, e.pendOldAt = e.pendCur, e.pendAt
		e.pendCur, e.pendAt = newBlockMap(0), now
	}
}

// pendingOf are the engines b is pending on at now (under the read lock): the current
// generation's entry, which took the old one's when it was made, else the old one's; each
// generation read for twice pendingTTL from its start.
func (e *ExactIndex) pendingOf(b uint64, now time.Time) slotView {
	if now.Sub(e.pendAt) < 2*pendingTTL {
		if v, ok := e.pendCur.get(b); ok {
			return v
		}
	}
	if now.Sub(e.pendOldAt) < 2*pendingTTL {
		v, _ := e.pendOld.get(b)
		return v
	}
	return slotView{}
}

// confirmLocked drops what was pending for key on the engine in slot: its events now say.
func (e *ExactIndex) confirmLocked(key uint64, slot int) {
	e.pendCur.remove(key, slot)
	e.pendOld.remove(key, slot)
}

// dropPendingLocked drops everything pending on slot (an engine whose part of the index starts
// afresh): the pending generations are small, a walk is cheap.
func (e *ExactIndex) dropPendingLocked(slot int) {
	for _, m := range []blockMap{e.pendCur, e.pendOld} {
		for k, s := range m.m {
			if s.view(m.wide, k).has(slot) {
				m.remove(k, slot)
			}
		}
	}
}
