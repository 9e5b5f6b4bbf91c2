package ingress

import (
	"fmt"
	"log/slog"
	"net"
	"strings"
	"sync"
	"time"
)

// connLog is fasthttp's logger. fasthttp's own prints a request it could not parse as it came,
// an API key in its Authorization header included, unthrottled: a client sending malformed
// requests could fill the log and put secrets in it. Here a connection error becomes one
// structured line — the peer's address and a short reason, never a byte of the request — and at
// most connLogBurst such lines are written per connLogWindow; the lines dropped are counted in
// the next one written.
type connLog struct {
	log *slog.Logger

	mu         sync.Mutex
	window     time.Time // start of the current window
	written    int       // lines written in it
	suppressed int       // lines dropped since the last one written
}

// The rate limit of connection-error lines: a burst of this many per window, then nothing until
// the next window.
const (
	connLogBurst  = 10
	connLogWindow = 10 * time.Second
)

// serveConnFormat is the message fasthttp logs for a connection that failed (workerpool.go).
const serveConnFormat = "error when serving connection %q<->%q: %v"

// Printf implements fasthttp.Logger. Only the failed-connection message carries request bytes
// (inside its error); it is rewritten. Every other message fasthttp logs (accept errors,
// connection limits) holds only counts and addresses, but its arguments are dropped all the
// same: the format string alone says what happened.
func (l *connLog) Printf(format string, args ...any) {
	if !l.allow() {
		return
	}
	suppressed := l.takeSuppressed()
	if format == serveConnFormat && len(args) == 3 {
		l.log.Warn("client connection failed", "peer", addrString(args[1]), "reason", connErrorReason(args[2]),
			"suppressed", suppressed)
		return
	}
	l.log.Warn("client listener: "+strings.TrimSpace(strings.SplitN(format, "%", 2)[0]), "suppressed", suppressed)
}

func (l *connLog) allow() bool {
	l.mu.Lock()
	defer l.mu.Unlock()
	now := time.Now()
	if now.Sub(l.window) >= connLogWindow {
		l.window, l.written = now, 0
	}
	if l.written >= connLogBurst {
		l.suppressed++
		return false
	}
	l.written++
	return true
}

func (l *connLog) takeSuppressed() int {
	l.mu.Lock()
	defer l.mu.Unlock()
	n := l.suppressed
	l.suppressed = 0
	return n
}

func addrString(v any) string {
	if a, ok := v.(net.Addr); ok {
		return a.String()
	}
	return "unknown"
}

// connErrorReason is the reason of a connection error without the request bytes fasthttp puts
// in it: the text up to the first quote, "buffer size" or "contents", at most 120 bytes of
// printable ASCII.
func connErrorReason(v any) string {
	s := fmt.Sprint(v)
	if err, ok := v.(error); ok {
		s = err.Error()
	}
	lower := strings.ToLower(s)
	for _, cut := range []string{`"`, "buffer size", "contents", "\n"} {
		if i := strings.Index(lower, cut); i >= 0 {
			s, lower = s[:i], lower[:i]
		}
	}
	s = strings.Map(func(r rune) rune {
		if r < 0x20 || r > 0x7e {
			return -1
		}
		return r
	}, s)
	s = strings.TrimRight(strings.TrimSpace(s), ":;,. ")
	if len(s) > 120 {
		s = s[:120]
	}
	if s == "" {
		return "malformed request"
	}
	return s
}
