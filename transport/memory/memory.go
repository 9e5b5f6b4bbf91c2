// Package memory is the router's one memory budget (server.max_buffered_bytes): every client
// body it reads and every answer it buffers whole (a passthrough answer, an assembled
// non-streaming response) is reserved here first, so that many large requests at once are
// refused (503 before their bodies are read) instead of growing the process without bound. When
// what is held falls well below its high-water mark the budget hands the freed memory back to
// the operating system, so that the process's RSS returns after a burst instead of staying at
// its peak until the runtime's next periodic collection. Size is the budget the key asks for:
// its value, or, unset, one derived from the memory limit the process runs under.
package memory

import (
	"errors"
	"io"
	"runtime"
	"runtime/debug"
	"sync"
	"sync/atomic"
	"time"
)

// Budget is the process-wide bound on bytes held. A nil *Budget bounds nothing (tests, probes
// and preflight use none). Its methods are safe for concurrent use.
type Budget struct {
	limit int64
	held  atomic.Int64
	// high is the most held since memory was last handed back.
	high atomic.Int64

	report func(held int64)
	kick   chan struct{}
	done   chan struct{}
	wg     sync.WaitGroup
}

// Options adjust a Budget.
type Options struct {
	// Report receives what is held, at most once a second while it changes (a gauge).
	Report func(held int64)
}

// Release to the operating system: once what is held has fallen by at least releaseStep from
// its high-water mark and to at most half of it, the freed memory is handed back (a collection
// and debug.FreeOSMemory), at most once per releaseEvery, after releaseSettle of quiet so that a
// burst's end is handed back once, and once more releaseEvery later for what its stragglers
// still held.
const (
	releaseStep   = 32 << 20
	releaseEvery  = 2 * time.Second
	releaseSettle = 200 * time.Millisecond
)

// New starts a budget of limit bytes; Close stops it.
func New(limit int64, opts Options) *Budget {
	b := &Budget{limit: limit, report: opts.Report, kick: make(chan struct{}, 1), done: make(chan struct{})}
	b.wg.Add(1)
	go b.run()
	return b
}

// Limit is the budget in bytes (0 for a nil budget: unbounded).
func (b *Budget) Limit() int64 {
	if b == nil {
		return 0
	}
	return b.limit
}

// Held is what is reserved now.
func (b *Budget) Held() int64 {
	if b == nil {
		return 0
	}
	return b.held.Load()
}

// Reserve takes n bytes of the budget, or reports false (and takes nothing) when they do not
// fit.
func (b *Budget) Reserve(n int64) bool {
	if b == nil || n <= 0 {
		return true
	}
	for {
		cur := b.held.Load()
		if cur+n > b.limit {
			return false
		}
		if b.held.CompareAndSwap(cur, cur+n) {
			for h := b.high.Load(); cur+n > h && !b.high.CompareAndSwap(h, cur+n); h = b.high.Load() {
			}
			return true
		}
	}
}

// Release gives back n bytes Reserve took.
func (b *Budget) Release(n int64) {
	if b == nil || n <= 0 {
		return
	}
	held := b.held.Add(-n)
	if high := b.high.Load(); high-held >= releaseStep && held <= high/2 {
		select {
		case b.kick <- struct{}{}:
		default:
		}
	}
}

// Close stops the budget's goroutine.
func (b *Budget) Close() {
	if b == nil {
		return
	}
	select {
	case <-b.done:
		return
	default:
	}
	close(b.done)
	b.wg.Wait()
}

func (b *Budget) run() {
	defer b.wg.Done()
	tick := time.NewTicker(time.Second)
	defer tick.Stop()
	var last time.Time
	var again <-chan time.Time // the follow-up of the last release, if one is due
	reported := int64(-1)
	for {
		select {
		case <-b.done:
			return
		case <-again:
			// What the burst's stragglers (connections closing, pooled buffers kept one cycle
			// more) held at the first release is garbage by now: hand it back too, unless a
			// new burst is under way.
			again = nil
			if b.held.Load() <= b.high.Load() {
				runtime.GC()
				debug.FreeOSMemory()
			}
		case <-tick.C:
			if h := b.held.Load(); h != reported && b.report != nil {
				b.report(h)
				reported = h
			}
		case <-b.kick:
			select { // let the rest of the burst end, and its memory become garbage
			case <-b.done:
				return
			case <-time.After(max(releaseSettle, releaseEvery-time.Since(last))):
			}
			held := b.held.Load()
			if high := b.high.Load(); high-held < releaseStep || held > high/2 {
				continue // held grew again meanwhile
			}
			// Two collections: the first frees what the burst left, the second what sync.Pool
			// caches (fasthttp's buffers) kept for one more cycle; FreeOSMemory then returns it.
			runtime.GC()
			debug.FreeOSMemory()
			b.high.Store(b.held.Load())
			last = time.Now()
			again = time.After(releaseEvery)
		}
	}
}

// Hold is one reservation, given back once: Free may be called any number of times.
type Hold struct {
	b *Budget
	n int64
}

// Take reserves n bytes as a Hold; ok is false (and nothing is held) when they do not fit.
func (b *Budget) Take(n int64) (h Hold, ok bool) {
	if !b.Reserve(n) {
		return Hold{}, false
	}
	return Hold{b: b, n: n}, true
}

// Grow adds n bytes to the hold, or reports false (and adds nothing) when they do not fit.
func (h *Hold) Grow(b *Budget, n int64) bool {
	if !b.Reserve(n) {
		return false
	}
	h.b = b
	h.n += n
	return true
}

// Size is what the hold holds.
func (h *Hold) Size() int64 { return h.n }

// Free gives the hold back.
func (h *Hold) Free() {
	if h.n > 0 {
		h.b.Release(h.n)
	}
	h.n = 0
}

// Errors of Read.
var (
	// ErrTooLarge: the body is larger than Read's limit.
	ErrTooLarge = errors.New("larger than its bound")
	// ErrNoRoom: the budget has no room for the body.
	ErrNoRoom = errors.New("the memory budget has no room for it")
)

// growStep is how much of a body of unknown length is reserved (and allocated) at a time, at
// least: then as much again as it holds, so that a large body is read in few steps.
const growStep = 64 << 10

// Read reads a body whole from r into a buffer reserved in b: size bytes when it is known (>= 0,
// reserved before a byte is read), else as it arrives, in growing steps. A body larger than
// limit is ErrTooLarge, one the budget has no room for ErrNoRoom. On success the caller owns the
// hold and frees it once the body is no longer used; on failure nothing is held.
func Read(r io.Reader, size, limit int, b *Budget) (body []byte, h Hold, err error) {
	if size >= 0 {
		if size > limit {
			return nil, Hold{}, ErrTooLarge
		}
		if !h.Grow(b, int64(size)) {
			return nil, Hold{}, ErrNoRoom
		}
		body = make([]byte, size)
		if _, err := io.ReadFull(r, body); err != nil {
			h.Free()
			return nil, Hold{}, err
		}
		return body, h, nil
	}
	for {
		if len(body) == cap(body) {
			grow := min(max(growStep, cap(body)), limit+1-len(body))
			if !h.Grow(b, int64(grow)) {
				h.Free()
				return nil, Hold{}, ErrNoRoom
			}
			nb := make([]byte, len(body), len(body)+grow)
			copy(nb, body)
			body = nb
		}
		n, err := r.Read(body[len(body):cap(body)])
		body = body[:len(body)+n]
		switch {
		case len(body) > limit:
			h.Free()
			return nil, Hold{}, ErrTooLarge
		case errors.Is(err, io.EOF):
			return body, h, nil
		case err != nil:
			h.Free()
			return nil, Hold{}, err
		}
	}
}

// chunkSize is the piece ReadChunks reads a body of unknown length in.
const chunkSize = 1 << 20

// ReadChunks is Read for a body that need not be contiguous (an answer relayed as it is): one
// buffer when size is known, else pieces of up to 1 MiB, each reserved before it is read, so
// that a long chunked answer is neither copied as it grows nor left behind as garbage.
func ReadChunks(r io.Reader, size, limit int, b *Budget) (chunks [][]byte, h Hold, err error) {
	if size >= 0 {
		body, h, err := Read(r, size, limit, b)
		if err != nil {
			return nil, h, err
		}
		return [][]byte{body}, h, nil
	}
	total := 0
	for {
		if !h.Grow(b, chunkSize) {
			h.Free()
			return nil, Hold{}, ErrNoRoom
		}
		c := make([]byte, chunkSize)
		n, err := io.ReadFull(r, c)
		total += n
		switch {
		case total > limit:
			h.Free()
			return nil, Hold{}, ErrTooLarge
		case errors.Is(err, io.EOF) || errors.Is(err, io.ErrUnexpectedEOF):
			if n > 0 {
				chunks = append(chunks, c[:n])
			}
			return chunks, h, nil
		case err != nil:
			h.Free()
			return nil, Hold{}, err
		}
		chunks = append(chunks, c)
	}
}
