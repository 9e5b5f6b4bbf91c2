package actors

import (
	"context"
	"time"

	"github.com/narwhal-router/narwhal/messages"
	"github.com/narwhal-router/narwhal/transport"
	"github.com/narwhal-router/narwhal/transport/telemetry"
)

// loadSample is an engine's last /metrics scrape as placement reads it.
type loadSample struct {
	at   time.Time // when the last successful scrape answered; zero: never
	load transport.EngineLoad
	// err is the last scrape's failure, empty after a success; failedAt when it happened.
	err      string
	failedAt time.Time
	failures int // consecutive
}

// fresh returns the scraped load when it is younger than stale.
func (v *engineView) fresh(now time.Time, stale time.Duration) (transport.EngineLoad, bool) {
	s := v.Scraped.Load()
	if s == nil || s.at.IsZero() || now.Sub(s.at) > stale {
		return transport.EngineLoad{}, false
	}
	return s.load, true
}

// loadScore is the engine's load for placement: its reservations, or with a fresh scrape the
// larger of those and the engine's running sequences (which include ours), plus its waiting
// queue.
func (v *engineView) loadScore(now time.Time, stale time.Duration) int {
	n := v.Load()
	if l, ok := v.fresh(now, stale); ok {
		n = max(n, l.Running) + l.Waiting
	}
	return n
}

// busyness is how full the engine is, 0..1 and over: reservations over max_inflight (0 when
// uncapped), raised to the scraped KV usage, and to 1 once requests wait in the engine.
func (v *engineView) busyness(now time.Time, stale time.Duration) float64 {
	b := 0.0
	if v.MaxInflight > 0 {
		b = float64(v.Load()) / float64(v.MaxInflight)
	}
	if l, ok := v.fresh(now, stale); ok {
		if l.HasKVUsage {
			b = max(b, l.KVUsage)
		}
		if l.Waiting > 0 {
			b = max(b, 1)
		}
	}
	return b
}

// loadState is the engine's load view for /engines and the tree dump.
func (v *engineView) loadState(now time.Time, stale time.Duration, prefixBlocks int) messages.LoadState {
	st := messages.LoadState{Reservations: v.Load(), Score: v.loadScore(now, stale), PrefixBlocks: prefixBlocks}
	if s := v.Scraped.Load(); s != nil {
		if !s.at.IsZero() {
			at := s.at
			st.ScrapedAt = &at
			st.Running, st.Waiting = s.load.Running, s.load.Waiting
			if s.load.HasKVUsage {
				u := s.load.KVUsage
				st.KVUsage = &u
			}
			st.Fresh = now.Sub(s.at) <= stale
		}
		st.ScrapeError = s.err
		st.ScrapeFailures = s.failures
	}
	return st
}

// scraper reads every engine's /metrics on an interval, each engine on its own goroutine so
// a slow engine delays nobody else's view; requests never wait for it. Engines are added as
// they join the fleet and removed as they leave it; it stops with stop.
type scraper struct {
	*perEngine
	interval time.Duration
	timeout  func() time.Duration // placement.scrape_timeout_s as the last reload left it
	m        *telemetry.Metrics
}

func startScraper(interval time.Duration, timeout func() time.Duration, m *telemetry.Metrics) *scraper {
	return &scraper{perEngine: newPerEngine(), interval: interval, timeout: timeout, m: m}
}

// add starts scraping v (nothing when scraping is off).
func (s *scraper) add(v *engineView) {
	if s == nil {
		return
	}
	s.start(v, nil, func(ctx context.Context) {
		t := time.NewTicker(s.interval)
		defer t.Stop()
		for {
			scrapeOnce(ctx, v, s.timeout(), s.m)
			select {
			case <-ctx.Done():
				return
			case <-t.C:
			}
		}
	})
}

// remove stops scraping v; its goroutine ends at once (a scrape in flight is cancelled).
func (s *scraper) remove(v *engineView) {
	if s != nil {
		s.end(v)
	}
}

func scrapeOnce(ctx context.Context, v *engineView, timeout time.Duration, m *telemetry.Metrics) {
	sctx, cancel := context.WithTimeout(ctx, timeout)
	l, err := v.Client.Load(sctx)
	cancel()
	if ctx.Err() != nil {
		return // shutting down: not the engine's failure
	}
	prev := v.Scraped.Load()
	next := &loadSample{}
	if prev != nil {
		*next = *prev
	}
	if err != nil {
		next.err, next.failedAt = err.Error(), time.Now()
		next.failures++
		m.EngineScrape(v.Name, "error")
	} else {
		next.at, next.load, next.err, next.failures = time.Now(), l, "", 0
		m.EngineScrape(v.Name, "ok")
		m.EngineLoad(v.Name, l.Running, l.Waiting, l.KVUsage)
	}
	v.Scraped.Store(next)
}

func (s *scraper) stop() {
	if s != nil {
		s.perEngine.stop()
	}
}

// loadState is v's load view with the prefix index's size for it.
func (r *Router) loadState(v *engineView) messages.LoadState {
	return v.loadState(time.Now(), r.current().Placement.ScrapeStaleS.Duration(), r.fleet.Index.heldBy(v.Idx))
}
