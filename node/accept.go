package node

import (
	"errors"
	"log/slog"
	"net"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/uber-go/tally/v4"
)

// Accept back-off while the process has no descriptor left: from acceptPauseMin, doubling to
// acceptPauseMax, the same shape as net/http's. A connection closing frees one at once; the
// pause only keeps the accept loop from spinning meanwhile.
const (
	acceptPauseMin = 5 * time.Millisecond
	acceptPauseMax = time.Second
	// acceptLogEvery throttles the log line of an exhausted listener to one per interval.
	acceptLogEvery = 10 * time.Second
)

// patientListener keeps accepting through descriptor exhaustion. fasthttp's Serve (and a
// wrapped listener's caller generally) stops for good on an accept error it deems permanent,
// and EMFILE/ENFILE are reported so: the process would exit when a burst of idle connections
// took its last descriptor. Here the accept is retried after a pause instead, counted
// (narwhal_accept_exhausted{listener}) and logged at most once per acceptLogEvery, while
// every connection already open keeps being served; accepting resumes once one closes.
type patientListener struct {
	net.Listener
	name      string
	exhausted tally.Counter
	log       *slog.Logger
	lastLog   atomic.Int64 // unix nanoseconds of the last log line
	pause     func(time.Duration)
}

// patient wraps ln (the listener named name: client, admin).
func (s *Server) patient(ln net.Listener, name string) net.Listener {
	return &patientListener{Listener: ln, name: name, log: s.log, pause: time.Sleep,
		exhausted: s.reporting.Metrics.Scope().Tagged(map[string]string{"listener": name}).Counter("accept_exhausted")}
}

// Accept implements net.Listener.
func (l *patientListener) Accept() (net.Conn, error) {
	pause := acceptPauseMin
	for {
		c, err := l.Listener.Accept()
		if err == nil || !descriptorsExhausted(err) {
			return c, err
		}
		l.exhausted.Inc(1)
		if now := time.Now().UnixNano(); now-l.lastLog.Load() >= int64(acceptLogEvery) {
			l.lastLog.Store(now)
			l.log.Error("out of file descriptors: new connections wait until some close; open ones are served (raise the process's nofile limit)",
				"listener", l.name, "error", err.Error(), "retry_in", pause.String())
		}
		l.pause(pause)
		pause = min(2*pause, acceptPauseMax)
	}
}

// descriptorsExhausted reports whether err says the process (EMFILE) or the system (ENFILE)
// has no file descriptor left, or the kernel no memory for a socket (ENOBUFS, ENOMEM).
func descriptorsExhausted(err error) bool {
	return errors.Is(err, syscall.EMFILE) || errors.Is(err, syscall.ENFILE) ||
		errors.Is(err, syscall.ENOBUFS) || errors.Is(err, syscall.ENOMEM)
}
