package health

import (
	"log/slog"
	"net/http"
	"strconv"
	"strings"
	"sync/atomic"
	"time"

	"github.com/narwhal-router/narwhal/config"
)

// A 429 or 503 is an engine asking for less load, never a failure: the breaker does not count
// it, and a retry of the request that got it never goes back there (the fault table's Shun).
// An engine that keeps answering so would still take a share of every other request, each
// paying a prefill for nothing. Pushback bounds that: once an engine has answered nothing but
// 429/503 for longer than recovery.backpressure.bound_s, placement passes it over for its
// Retry-After (at most recovery.backpressure.max_pass_s), or for recovery.backpressure.pass_s
// when it sent none, and uses it only if no other engine can take the leg. A commit on the
// engine ends it. Nothing here touches the breaker.

// Pushback is an engine's backpressure record, written by the request supervisors whose legs
// end there and read by placement, without a lock.
type Pushback struct {
	// since is the first 429/503 since the engine's last commit (unix nanoseconds; 0: none).
	since atomic.Int64
	// until is when the engine stops being passed over (unix nanoseconds; 0: never was).
	until atomic.Int64
}

// passedOver says placement should use the engine only when nothing else can take the leg.
func (p *Pushback) PassedOver(now time.Time) bool {
	u := p.until.Load()
	return u != 0 && now.UnixNano() < u
}

// pushedBack records a 429/503 answer (retryAfter is the engine's Retry-After header, "" when
// none) and passes the engine over once it has pushed back for longer than the bound.
func (p *Pushback) PushedBack(now time.Time, retryAfter string, cfg config.BackpressureRuntime, engine string, log *slog.Logger) {
	n := now.UnixNano()
	p.since.CompareAndSwap(0, n)
	since := p.since.Load()
	if since == 0 || time.Duration(n-since) < cfg.Bound {
		return
	}
	pass := cfg.Pass
	if d, ok := ParseRetryAfter(retryAfter, now); ok {
		pass = min(d, cfg.MaxPass)
	}
	until := n + int64(pass)
	for {
		cur := p.until.Load()
		if cur >= until {
			return
		}
		if p.until.CompareAndSwap(cur, until) {
			if cur <= n && log != nil { // it was not passed over: say so once per spell
				log.Info("engine passed over: it has answered only 429/503", "engine", engine,
					"for", time.Duration(n-since).Round(time.Millisecond).String(), "pass_over", pass.String())
			}
			return
		}
	}
}

// served records a commit on the engine: it is no longer pushing back.
func (p *Pushback) Served() {
	if p.since.Load() != 0 {
		p.since.Store(0)
	}
	if p.until.Load() != 0 {
		p.until.Store(0)
	}
}

// ParseRetryAfter reads a Retry-After header: a number of seconds or an HTTP date.
func ParseRetryAfter(v string, now time.Time) (time.Duration, bool) {
	v = strings.TrimSpace(v)
	if v == "" {
		return 0, false
	}
	if s, err := strconv.ParseFloat(v, 64); err == nil {
		if s < 0 || s != s {
			return 0, false
		}
		return time.Duration(min(s, 1e6) * float64(time.Second)), true
	}
	if t, err := http.ParseTime(v); err == nil {
		return max(t.Sub(now), 0), true
	}
	return 0, false
}
