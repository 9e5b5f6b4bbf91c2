package telemetry

import (
	"context"
	"log/slog"
	"sync"
	"time"
)

// maxThrottleKeys bounds the keys a throttled logger keeps: past it, windows that have ended are
// dropped, and if none has, all are (a few more lines may then pass; memory stays bounded).
const maxThrottleKeys = 4096

// Throttle returns a logger that writes at most burst records per interval for each key — a
// record's message and the value of its "engine" attribute — and adds to the next record it
// writes for a key how many it dropped ("suppressed"). It is for lines a peer can make the router
// repeat at will: a hostile KV event publisher that restarts, leaves a gap or breaks its stream on
// every batch would otherwise write a line per batch.
func Throttle(log *slog.Logger, interval time.Duration, burst int) *slog.Logger {
	return slog.New(throttleHandler{inner: log.Handler(), state: newThrottleState(interval, burst, time.Now)})
}

type throttleHandler struct {
	inner slog.Handler
	state *throttleState
}

func (h throttleHandler) Enabled(ctx context.Context, l slog.Level) bool {
	return h.inner.Enabled(ctx, l)
}

func (h throttleHandler) Handle(ctx context.Context, r slog.Record) error {
	engine := ""
	r.Attrs(func(a slog.Attr) bool {
		if a.Key == "engine" {
			engine = a.Value.String()
			return false
		}
		return true
	})
	pass, suppressed := h.state.admit(r.Message + "\x00" + engine)
	if !pass {
		return nil
	}
	if suppressed > 0 {
		r = r.Clone()
		r.AddAttrs(slog.Int("suppressed", suppressed))
	}
	return h.inner.Handle(ctx, r)
}

func (h throttleHandler) WithAttrs(a []slog.Attr) slog.Handler {
	return throttleHandler{inner: h.inner.WithAttrs(a), state: h.state}
}

func (h throttleHandler) WithGroup(g string) slog.Handler {
	return throttleHandler{inner: h.inner.WithGroup(g), state: h.state}
}

// throttleState is the throttle's policy: per key, a window of interval from its first record,
// burst records passed in it, and a count of the dropped ones.
type throttleState struct {
	now      func() time.Time
	interval time.Duration
	burst    int

	mu      sync.Mutex
	windows map[string]*throttleWindow
}

type throttleWindow struct {
	start           time.Time
	passed, dropped int
}

func newThrottleState(interval time.Duration, burst int, now func() time.Time) *throttleState {
	return &throttleState{now: now, interval: interval, burst: max(burst, 1), windows: map[string]*throttleWindow{}}
}

// admit says whether a record of key passes, and how many of key were dropped before it.
func (s *throttleState) admit(key string) (pass bool, suppressed int) {
	now := s.now()
	s.mu.Lock()
	defer s.mu.Unlock()
	w := s.windows[key]
	if w == nil || now.Sub(w.start) >= s.interval {
		if w == nil {
			s.makeRoom(now)
			w = &throttleWindow{}
			s.windows[key] = w
		}
		w.start, w.passed = now, 0
	}
	if w.passed >= s.burst {
		w.dropped++
		return false, 0
	}
	w.passed++
	suppressed, w.dropped = w.dropped, 0
	return true, suppressed
}

// makeRoom keeps the windows under maxThrottleKeys.
func (s *throttleState) makeRoom(now time.Time) {
	if len(s.windows) < maxThrottleKeys {
		return
	}
	for k, w := range s.windows {
		if now.Sub(w.start) >= s.interval {
			delete(s.windows, k)
		}
	}
	if len(s.windows) >= maxThrottleKeys {
		clear(s.windows)
	}
}
