package actors

import (
	"context"
	"time"

	"github.com/narwhal-router/narwhal/actors/placement"
	"github.com/narwhal-router/narwhal/messages"
	"github.com/narwhal-router/narwhal/transport/telemetry"
)

// loadState is the engine's load view for /engines and the tree dump.
func loadStateOf(v *placement.Engine, now time.Time, stale time.Duration, prefixBlocks int) messages.LoadState {
	st := messages.LoadState{Reservations: v.Load(), Score: v.LoadScore(now, stale), PrefixBlocks: prefixBlocks}
	if s := v.Scraped.Load(); s != nil {
		if !s.At.IsZero() {
			at := s.At
			st.ScrapedAt = &at
			st.Running, st.Waiting = s.Load.Running, s.Load.Waiting
			if s.Load.HasKVUsage {
				u := s.Load.KVUsage
				st.KVUsage = &u
			}
			st.Fresh = now.Sub(s.At) <= stale
		}
		st.ScrapeError = s.Err
		st.ScrapeFailures = s.Failures
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

// add starts scraping v (nothing when scraping is off); a scrape showing several data-parallel
// ranks while v has none is reported to found, when it is not nil (ranks.go).
func (s *scraper) add(v *placement.Engine, found func(ranks int)) {
	if s == nil {
		return
	}
	s.start(v, nil, func(ctx context.Context) {
		t := time.NewTicker(s.interval)
		defer t.Stop()
		for {
			scrapeOnce(ctx, v, s.timeout(), s.m)
			if l, ok := v.Fresh(time.Now(), s.interval+s.timeout()); found != nil && ok && l.RankCount() > 1 && len(v.Ranks()) == 0 {
				found(l.RankCount())
			}
			select {
			case <-ctx.Done():
				return
			case <-t.C:
			}
		}
	})
}

// remove stops scraping v; its goroutine ends at once (a scrape in flight is cancelled).
func (s *scraper) remove(v *placement.Engine) {
	if s != nil {
		s.end(v)
	}
}

func scrapeOnce(ctx context.Context, v *placement.Engine, timeout time.Duration, m *telemetry.Metrics) {
	sctx, cancel := context.WithTimeout(ctx, timeout)
	l, err := v.Client.Load(sctx)
	cancel()
	if ctx.Err() != nil {
		return // shutting down: not the engine's failure
	}
	prev := v.Scraped.Load()
	next := &placement.LoadSample{}
	if prev != nil {
		*next = *prev
	}
	if err != nil {
		next.Err, next.FailedAt = err.Error(), time.Now()
		next.Failures++
		m.EngineScrape(v.Name, "error")
	} else {
		next.At, next.Load, next.Err, next.Failures = time.Now(), l, "", 0
		m.EngineScrape(v.Name, "ok")
		m.EngineLoad(v.Name, l.Running, l.Waiting, l.KVUsage)
		refreshAdapters(ctx, v, timeout, l) // lora.go
	}
	v.Scraped.Store(next)
}

func (s *scraper) stop() {
	if s != nil {
		s.perEngine.stop()
	}
}

// loadState is v's load view with the prefix index's size for it.
func (r *Router) loadState(v *placement.Engine) messages.LoadState {
	st := loadStateOf(v, time.Now(), r.current().Placement.ScrapeStaleS.Duration(), r.fleet.Index.HeldBy(v.Idx))
	st.Ranks = r.rankStates(v)
	return st
}
