package discovery

import (
	"context"
	"log/slog"
	"reflect"
	"slices"
	"strings"
	"time"

	"github.com/narwhal-router/narwhal/config"
)

// Backoff is how long a failing source waits before its next try: Initial after the first
// failure, doubled after each further one up to Max (discovery.retry_initial_s and
// discovery.retry_max_s). The zero value waits nothing; Reset after a success.
type Backoff struct {
	Initial, Max time.Duration
	next         time.Duration
}

// Next returns the wait before the next try and doubles the one after it.
func (b *Backoff) Next() time.Duration {
	if b.next == 0 {
		b.next = b.Initial
	}
	d := b.next
	b.next = min(2*b.next, b.Max)
	return min(d, b.Max)
}

// Reset makes the next failure wait Initial again.
func (b *Backoff) Reset() { b.next = 0 }

// Retry runs session until ctx ends. Each time it fails, the error is logged and reported (the
// source's last set stands) and session runs again after b's next wait; a session resets b
// once it has reported a set. It is the loop of a source that watches something it connects to.
func Retry(ctx context.Context, b *Backoff, log *slog.Logger, report func(Report), session func() error) {
	for {
		err := session()
		if ctx.Err() != nil {
			return
		}
		wait := b.Next()
		log.Warn("engine source failing; keeping the engines it last reported", "err", err, "retry_in", wait)
		report(Report{Err: err})
		if !Sleep(ctx, wait) {
			return
		}
	}
}

// Sleep waits for d, or until ctx ends; it reports whether the wait ran out (false: ctx ended).
func Sleep(ctx context.Context, d time.Duration) bool {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
		return true
	case <-ctx.Done():
		return false
	}
}

// Changes wraps a source's report function so that the source may call it after every
// refresh: a set equal to the last one passed on is dropped, unless an error was passed on
// since. Engines are passed on sorted by name, so every node sees one set in one order.
func Changes(report func(Report)) func(Report) {
	var last []config.Engine
	fresh := true // nothing passed on yet, or an error since the last set
	return func(r Report) {
		if r.Err != nil {
			fresh = true
			report(r)
			return
		}
		engines := slices.Clone(r.Engines)
		slices.SortFunc(engines, func(a, b config.Engine) int { return strings.Compare(a.Name, b.Name) })
		if !fresh && reflect.DeepEqual(engines, last) {
			return
		}
		fresh, last = false, engines
		report(Report{Engines: engines})
	}
}
