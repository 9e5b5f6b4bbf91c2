package actors

import (
	"context"
	"sync"
)

// perEngine runs one goroutine per engine — a scraper, a KV event feed — started when the engine
// joins the fleet and cancelled when it leaves; stop cancels them all and waits for them.
type perEngine struct {
	ctx    context.Context
	cancel context.CancelFunc
	wg     sync.WaitGroup

	mu sync.Mutex
	// per is keyed by the engine, or by what else runs a goroutine of its own for it (a
	// data-parallel rank's KV event feed: its *placement.Rank).
	per map[any]context.CancelFunc
}

func newPerEngine() *perEngine {
	ctx, cancel := context.WithCancel(context.Background())
	return &perEngine{ctx: ctx, cancel: cancel, per: map[any]context.CancelFunc{}}
}

// start runs run for v on its own goroutine unless one runs already or stop was called; run
// must return once its context is done. before, when start goes ahead, runs first under the
// lock (what the goroutine needs set up before anything can remove v).
func (p *perEngine) start(v any, before func(), run func(ctx context.Context)) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.ctx.Err() != nil || p.per[v] != nil {
		return
	}
	ctx, cancel := context.WithCancel(p.ctx)
	p.per[v] = cancel
	if before != nil {
		before()
	}
	p.wg.Add(1)
	go func() {
		defer p.wg.Done()
		run(ctx)
	}()
}

// end cancels v's goroutine, reporting whether one ran; it ends at once (work in flight is
// cancelled).
func (p *perEngine) end(v any) bool {
	p.mu.Lock()
	cancel := p.per[v]
	delete(p.per, v)
	p.mu.Unlock()
	if cancel != nil {
		cancel()
	}
	return cancel != nil
}

// stop cancels every goroutine and waits for them to return.
func (p *perEngine) stop() {
	p.mu.Lock()
	p.cancel()
	p.mu.Unlock()
	p.wg.Wait()
}
