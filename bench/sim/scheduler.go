package sim

import (
	"context"
	"slices"
	"sync"
	"time"

	"github.com/narwhal-router/narwhal/bench/sim/kvwire"
)

// The capacity model: one scheduler per engine runs vLLM-style steps on a goroutine of
// its own. Each step
//
//  1. gives every running sequence past its prefill one decode token, then spends what
//     is left of the MaxNumBatchedTokens budget on the running sequences' prefill chunks,
//     oldest first;
//  2. with budget still left, admits waiting sequences in arrival order while fewer than
//     MaxNumSeqs run and the head's blocks fit in the KV cache (the head waits otherwise:
//     no skipping ahead), each with a first prefill chunk. A sequence of a LoRA adapter
//     that max_loras keeps out is skipped, as vLLM skips it, and the next one considered
//     (lora.go); an adapter entering a GPU slot makes the step LoRASwap longer. As in vLLM's scheduler, a
//     request leaves the waiting queue only when a step has tokens for it, so a backlog
//     of prompts shows as vllm:num_requests_waiting, and a prompt's prefix-cache lookup
//     happens when it is admitted (it may hit blocks an earlier prompt computed while it
//     waited);
//  3. lasts ITL + ITLPerSeq × (sequences in the step) + PrefillPerToken × (prefill tokens
//     in the step), during which it sleeps;
//  4. then delivers: a decode sequence gains a token; a sequence whose last prompt chunk
//     was computed gains its first token (vLLM samples it in the same step) and its full
//     prompt blocks enter the prefix cache.
//
// A sequence holds ceil((prompt + output) / BlockSize) blocks from admission to its end
// (no preemption). Its cached prompt blocks are reused: at most (prompt − 1) / BlockSize
// of them, since vLLM always computes the last prompt token. A sequence whose KV came
// from a producer computes only that last token.
type scheduler struct {
	maxSeqs   int
	budget    int
	blockSize int
	itl       time.Duration
	perSeq    time.Duration
	perToken  time.Duration
	// expire frees pins whose lease ran out (their blocks come back); called without mu.
	expire func()
	// publish, when KV events are on, sends the events of one step (called with mu held;
	// it must not block).
	publish func([]kvwire.Event)

	mu      sync.Mutex
	kv      *kvCache
	waiting []*seq
	running []*seq
	loading int // decodes pulling their KV from a producer, reported as waiting
	wake    chan struct{}
	lora    loraGate
	swapped time.Duration // adapter loads of the step being planned

	// counters, in tokens except where noted
	queries  int64 // prompt tokens looked up in the prefix cache
	hits     int64 // of which found cached
	computed int64 // prompt tokens computed
	queued   int64 // sequences a step passed over (they waited for a slot, budget or blocks)
	steps    int64
}

type seqState uint8

const (
	seqNew seqState = iota
	seqWaiting
	seqRunning
	seqFinished // all tokens produced; a prefill leg still holds its blocks
	seqReleased
)

// seq is one generation inside the scheduler. The generation's goroutine creates it,
// submits it, waits on notify for produced to grow, and releases it at its end.
type seq struct {
	prompt int
	hashes []uint64  // chained hashes of the full prompt blocks
	tokens []uint32  // the prompt's token ids, for BlockStored events
	keys   extraKeys // the prompt's extra hash keys, for BlockStored events
	out    int       // tokens to produce
	loaded bool      // the prompt's KV came from a producer
	keep   bool      // a prefill leg: keep the blocks after the last token

	notify chan struct{} // signalled whenever produced grows

	// under the scheduler's mu
	state     seqState
	hold      blockHold
	toCompute int // prompt tokens still to compute
	cached    int // prompt tokens not computed (prefix hits, transferred KV)
	hitBlocks int
	produced  int
	passed    bool // a step was planned while it waited and did not admit it
}

func newScheduler(o Options, expire func()) *scheduler {
	return &scheduler{
		maxSeqs: o.MaxNumSeqs, budget: o.MaxNumBatchedTokens, blockSize: o.BlockSize,
		itl: o.ITL, perSeq: o.ITLPerSeq, perToken: o.PrefillPerToken, expire: expire,
		kv: newKVCache(o.KVBlocks), wake: make(chan struct{}, 1), lora: loraGate{max: o.MaxLoRAs, swap: o.LoRASwap},
	}
}

func newSeq(prompt int, hashes []uint64, out int, loaded, keep bool) *seq {
	return &seq{prompt: prompt, hashes: hashes, out: max(out, 1), loaded: loaded, keep: keep,
		notify: make(chan struct{}, 1)}
}

func notify(c chan struct{}) {
	select {
	case c <- struct{}{}:
	default:
	}
}

// submit queues q; the next step starts it if there is room (planLocked).
func (s *scheduler) submit(q *seq) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if q.state != seqNew {
		return
	}
	q.state = seqWaiting
	s.waiting = append(s.waiting, q)
	notify(s.wake) // the next step admits it if it has room

}

// progress returns how many tokens q has produced and how many of its prompt tokens
// were not computed.
func (s *scheduler) progress(q *seq) (produced, cached int) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return q.produced, q.cached
}

// release ends q wherever it is (waiting, running, finished) and gives back its
// blocks; it is idempotent.
func (s *scheduler) release(q *seq) {
	s.mu.Lock()
	defer s.mu.Unlock()
	switch q.state {
	case seqReleased:
		return
	case seqWaiting:
		s.waiting = slices.DeleteFunc(s.waiting, func(x *seq) bool { return x == q })
	case seqRunning:
		s.running = slices.DeleteFunc(s.running, func(x *seq) bool { return x == q })
	}
	if q.state != seqNew {
		s.kv.release(&q.hold)
	}
	q.state = seqReleased
	notify(s.wake) // blocks or a running slot came free
}

// cachedPrefix returns how many of hashes' leading blocks the prefix cache holds.
func (s *scheduler) cachedPrefix(hashes []uint64) int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.kv.match(hashes)
}

// loadingDelta counts decodes pulling KV from a producer (vLLM's WAITING_FOR_REMOTE_KVS).
func (s *scheduler) loadingDelta(d int) {
	s.mu.Lock()
	s.loading += d
	s.mu.Unlock()
}

// dropCached empties the prefix cache of unreferenced blocks (a restart).
func (s *scheduler) dropCached() {
	s.mu.Lock()
	s.kv.dropCached()
	s.publishLocked()
	s.mu.Unlock()
}

// admitHeadLocked starts the oldest waiting sequence max_loras lets in if a slot is free and
// its blocks fit, and returns it (nil: it waits, and so does everyone behind it).
func (s *scheduler) admitHeadLocked() *seq {
	if len(s.running) >= s.maxSeqs {
		return nil
	}
	i := slices.IndexFunc(s.waiting, func(q *seq) bool { return s.lora.admits(q.keys.lora, s.running) })
	if i < 0 {
		return nil
	}
	q := s.waiting[i]
	total := (q.prompt + q.out + s.blockSize - 1) / s.blockSize
	maxHit := (q.prompt - 1) / s.blockSize
	h, hit, ok := s.kv.acquire(q.hashes, maxHit, total)
	if !ok {
		return nil
	}
	s.waiting = slices.Delete(s.waiting, i, i+1)
	s.swapped += s.lora.activate(q.keys.lora)
	q.hold, q.hitBlocks = h, hit
	q.cached = hit * s.blockSize
	if q.loaded {
		q.cached = max(q.cached, q.prompt-1)
	}
	q.toCompute = q.prompt - q.cached
	s.queries += int64(q.prompt)
	s.hits += int64(hit * s.blockSize)
	q.state = seqRunning
	s.running = append(s.running, q)
	return q
}

// stepItem is one sequence's share of a step: a decode token (chunk 0) or a prefill
// chunk of that many prompt tokens.
type stepItem struct {
	q     *seq
	chunk int
}

// planLocked chooses the step's work: decodes first, then the running sequences' prefill
// chunks, then newly admitted sequences' first chunks, all within the token budget. It
// returns the work and the step's duration.
func (s *scheduler) planLocked(items []stepItem) ([]stepItem, time.Duration) {
	budget := s.budget
	s.swapped = 0
	for _, q := range s.running {
		if q.toCompute == 0 {
			items = append(items, stepItem{q: q})
			budget--
		}
	}
	prefill := 0
	chunk := func(q *seq) {
		c := min(q.toCompute, budget)
		items = append(items, stepItem{q: q, chunk: c})
		budget -= c
		prefill += c
	}
	for _, q := range s.running {
		if q.toCompute > 0 && budget > 0 {
			chunk(q)
		}
	}
	for budget > 0 {
		q := s.admitHeadLocked()
		if q == nil {
			break
		}
		chunk(q) // toCompute ≥ 1: the last prompt token is always computed
	}
	for _, q := range s.waiting {
		if !q.passed {
			q.passed = true
			s.queued++
		}
	}
	return items, s.itl + time.Duration(len(items))*s.perSeq + time.Duration(prefill)*s.perToken + s.swapped
}

// applyLocked delivers a step's work to the sequences still running.
func (s *scheduler) applyLocked(items []stepItem) {
	s.steps++
	for _, it := range items {
		q := it.q
		if q.state != seqRunning {
			continue // released while the step ran
		}
		if it.chunk > 0 {
			q.toCompute -= it.chunk
			s.computed += int64(it.chunk)
			if q.toCompute > 0 {
				continue
			}
			s.kv.commit(&q.hold, q.hashes, q.tokens, q.keys)
		}
		q.produced++
		notify(q.notify)
		if q.produced >= q.out {
			s.running = slices.DeleteFunc(s.running, func(x *seq) bool { return x == q })
			q.state = seqFinished
			if !q.keep {
				s.kv.release(&q.hold)
				q.state = seqReleased
			}
		}
	}
}

// idlePoll is how often an idle scheduler with a blocked queue looks again, so pins
// whose lease ran out (freed lazily) give their blocks back.
const idlePoll = 5 * time.Millisecond

// run executes steps until ctx ends.
func (s *scheduler) run(ctx context.Context) {
	timer := time.NewTimer(time.Hour)
	defer timer.Stop()
	var items []stepItem
	for {
		s.expire()
		s.mu.Lock()
		var d time.Duration
		items, d = s.planLocked(items[:0])
		blocked := len(s.waiting) > 0
		s.mu.Unlock()

		if len(items) == 0 {
			var poll <-chan time.Time
			if blocked {
				timer.Reset(idlePoll)
				poll = timer.C
			}
			select {
			case <-ctx.Done():
				return
			case <-s.wake:
			case <-poll:
			}
			timer.Stop()
			continue
		}
		if d > 0 {
			timer.Reset(d)
			select {
			case <-ctx.Done():
				return
			case <-timer.C:
			}
		} else if ctx.Err() != nil {
			return
		}
		s.mu.Lock()
		s.applyLocked(items)
		s.publishLocked()
		s.mu.Unlock()
	}
}

// publishLocked sends the KV events the step (or a restart) caused, if anyone listens.
func (s *scheduler) publishLocked() {
	if s.publish == nil {
		return
	}
	if ev := s.kv.takeEvents(); len(ev) > 0 {
		s.publish(ev)
	}
}

// schedCounts is a snapshot for /metrics and /sim/stats.
type schedCounts struct {
	running, waiting                int
	blocksUsed, blocksCached        int
	queries, hits, computed, queued int64
	steps, evicted                  int64
	loraSwaps                       int64
}

func (s *scheduler) counts() schedCounts {
	s.mu.Lock()
	defer s.mu.Unlock()
	return schedCounts{
		running: len(s.running), waiting: len(s.waiting) + s.loading,
		blocksUsed: s.kv.held, blocksCached: len(s.kv.byHash),
		queries: s.queries, hits: s.hits, computed: s.computed, queued: s.queued,
		steps: s.steps, evicted: s.kv.evicted, loraSwaps: s.lora.swaps,
	}
}
