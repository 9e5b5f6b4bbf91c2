package placement

import (
	"time"

	"github.com/narwhal-router/narwhal/transport"
)

// LoadSample is an engine's last /metrics scrape as placement reads it.
type LoadSample struct {
	At   time.Time // when the last successful scrape answered; zero: never
	Load transport.EngineLoad
	// Err is the last scrape's failure, empty after a success; FailedAt when it happened.
	Err      string
	FailedAt time.Time
	Failures int // consecutive
}

// fresh returns the scraped load when it is younger than stale.
func (v *Engine) Fresh(now time.Time, stale time.Duration) (transport.EngineLoad, bool) {
	s := v.Scraped.Load()
	if s == nil || s.At.IsZero() || now.Sub(s.At) > stale {
		return transport.EngineLoad{}, false
	}
	return s.Load, true
}

// loadScore is the engine's load for placement: its reservations, or with a fresh scrape the
// larger of those and the engine's running sequences (which include ours), plus its waiting
// queue.
func (v *Engine) LoadScore(now time.Time, stale time.Duration) int {
	n := v.Load()
	if l, ok := v.Fresh(now, stale); ok {
		n = max(n, l.Running) + l.Waiting
	}
	return n
}

// busyness is how full the engine is, 0..1 and over: reservations over max_inflight (0 when
// uncapped), raised to the scraped KV usage, and to 1 once requests wait in the engine.
func (v *Engine) Busyness(now time.Time, stale time.Duration) float64 {
	b := 0.0
	if v.MaxInflight > 0 {
		b = float64(v.Load()) / float64(v.MaxInflight)
	}
	if l, ok := v.Fresh(now, stale); ok {
		if l.HasKVUsage {
			b = max(b, l.KVUsage)
		}
		if l.Waiting > 0 {
			b = max(b, 1)
		}
	}
	return b
}
