package kv

import (
	"context"
	"fmt"
	"net/http"
	"slices"
	"sync"
	"time"
)

// bootstrapEntries bounds the producers remembered; past it the cache starts over.
const bootstrapEntries = 4096

// bootstrapCache holds each bootstrap address's engine ids (index: data-parallel rank), asks
// again as its policy says (recheck.go), and tells its observer what it learned. One query
// runs per address at a time: attempts planned while the first one runs wait for its answer,
// attempts planned while a recheck runs use the answer they have and watch the recheck.
type bootstrapCache struct {
	client *http.Client
	now    func() time.Time
	policy bootstrapPolicy

	mu      sync.Mutex
	entries map[string]*bootstrapEntry
	obs     BootstrapObserver // nil: nobody listens
}

// bootstrapEntry is one answer of a bootstrap server, or the query that will give it.
type bootstrapEntry struct {
	done chan struct{} // closed when the query ends; ids and err never change after
	ids  []string
	err  error
	// prev is the last answer before this query, if any (kept across failed queries): a
	// different answer is a restart.
	prev []string

	// Under the cache's mu once done:
	confirmed, checked time.Time
	forgotten          bool
	recheck            *recheck // under way, or nil
}

func newBootstrapCache() *bootstrapCache {
	return &bootstrapCache{
		client:  bootstrapClient(),
		now:     time.Now,
		policy:  bootstrapPolicy{recheckAfter: DefaultRecheckAfter, maxAge: bootstrapMaxAge},
		entries: make(map[string]*bootstrapEntry),
	}
}

func (e *bootstrapEntry) answered() bool {
	select {
	case <-e.done:
		return true
	default:
		return false
	}
}

// state is what the policy reads of e (nil: nothing cached); the cache's mu is held.
func (e *bootstrapEntry) state() answerState {
	if e == nil {
		return answerState{}
	}
	if !e.answered() {
		return answerState{cached: true}
	}
	return answerState{cached: true, answered: true, failed: e.err != nil, forgotten: e.forgotten,
		confirmed: e.confirmed, checked: e.checked, rechecking: e.recheck != nil}
}

// cached returns addr's engine ids if a query already answered them.
func (c *bootstrapCache) cached(addr string) ([]string, bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	e, ok := c.entries[addr]
	if !ok || !e.answered() {
		return nil, false
	}
	return e.ids, e.err == nil
}

// get returns addr's engine ids for an attempt through producer, asking its bootstrap server
// first when the policy says so, and the recheck under way that the attempt must watch (nil:
// none). A failed query is not used: the next attempt asks again.
func (c *bootstrapCache) get(ctx context.Context, addr, producer string) ([]string, *recheck, error) {
	now := c.now()
	c.mu.Lock()
	e := c.entries[addr]
	switch judgeAnswer(e.state(), now, c.policy) {
	case useAnswer:
		c.mu.Unlock()
		return e.ids, nil, nil
	case joinRecheck:
		r := e.recheck
		c.mu.Unlock()
		return e.ids, r, nil
	case startRecheck:
		r := newRecheck()
		e.recheck, e.checked = r, now
		c.mu.Unlock()
		// Bounded by the client's timeout (bootstrapTimeout); it ends whatever the attempts do.
		go c.runRecheck(addr, producer, e, r)
		return e.ids, r, nil
	case askFirst:
		old := e
		e = &bootstrapEntry{done: make(chan struct{})}
		if old != nil && old.answered() {
			e.prev = old.ids
			if old.err != nil {
				e.prev = old.prev
			}
		}
		if len(c.entries) >= bootstrapEntries {
			clear(c.entries)
		}
		c.entries[addr] = e
		c.mu.Unlock()
		// The query is the entry's, not this attempt's: an attempt that gives up does not
		// fail the others waiting for the answer.
		c.ask(context.WithoutCancel(ctx), addr, producer, e)
	default: // awaitAnswer
		c.mu.Unlock()
	}
	select {
	case <-e.done:
		return e.ids, nil, e.err
	case <-ctx.Done():
		return nil, nil, fmt.Errorf("waiting for the mooncake bootstrap server at %s: %w", addr, ctx.Err())
	}
}

// ask runs e's query and settles it.
func (c *bootstrapCache) ask(ctx context.Context, addr, producer string, e *bootstrapEntry) {
	e.ids, e.err = c.query(ctx, addr)
	now := c.now()
	c.mu.Lock()
	e.confirmed, e.checked = now, now
	prev := e.prev
	if e.err == nil {
		e.prev = nil
	}
	obs := c.obs
	c.mu.Unlock()
	close(e.done)
	if obs != nil && e.err == nil && prev != nil && !slices.Equal(prev, e.ids) {
		obs.Restarted(producer, addr, prev, e.ids)
	}
}

// runRecheck asks addr again while attempts planned on e's answer run: the same answer
// confirms e; another replaces it (if nothing newer did) and ends the attempts whose rank's
// id is gone; a failed query changes nothing.
func (c *bootstrapCache) runRecheck(addr, producer string, e *bootstrapEntry, r *recheck) {
	ids, err := c.query(context.Background(), addr)
	now := c.now()
	result, replaced := RecheckFailed, false
	c.mu.Lock()
	e.recheck = nil
	switch {
	case err != nil:
	case slices.Equal(ids, e.ids):
		result, e.confirmed = RecheckConfirmed, now
	default:
		result = RecheckChanged
		if replaced = c.entries[addr] == e; replaced {
			n := &bootstrapEntry{done: make(chan struct{}), ids: ids, confirmed: now, checked: now}
			close(n.done)
			c.entries[addr] = n
		}
	}
	obs := c.obs
	c.mu.Unlock()
	if obs != nil {
		obs.Rechecked(producer, result, err)
		if replaced { // else a newer query replaced e, and reports the change itself
			obs.Restarted(producer, addr, e.ids, ids)
		}
	}
	if err == nil {
		r.ids = ids
	}
	r.end()
}

// forget has the next attempt through addr ask its server again before it is planned. The
// answer is kept until then, to tell whether the next one differs.
func (c *bootstrapCache) forget(addr string) {
	c.mu.Lock()
	if e, ok := c.entries[addr]; ok && e.answered() { // a query under way answers afresh anyway
		e.forgotten = true
	}
	c.mu.Unlock()
}

// observe has the cache report to o.
func (c *bootstrapCache) observe(o BootstrapObserver) {
	c.mu.Lock()
	c.obs = o
	c.mu.Unlock()
}
