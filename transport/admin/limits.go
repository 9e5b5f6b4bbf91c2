package admin

import (
	"net/http"
	"strconv"
	"time"
)

// The admin listener's own limits. An operator must never be locked out of it: a client that
// sends a body slowly, or reads an answer slowly, holds a connection for at most these; and a
// profile runs for at most MaxProfileSeconds, so that no request (an <img> tag on any page once
// could start one of a day) keeps the CPU profiler, which runs one at a time, from the operator.
const (
	// MaxProfileSeconds caps pprof's seconds parameter (/debug/pprof/profile, /trace, and the
	// delta profiles of /debug/pprof/<name>?seconds=): a minute is ample for a CPU profile of a
	// steady load, and a longer one can be taken as several.
	MaxProfileSeconds = 60
)

// readTimeout bounds reading a request's body; writeTimeout writing its answer (plus the
// profile's seconds for a profile). They are variables for the package's tests.
var (
	readTimeout  = 30 * time.Second
	writeTimeout = 30 * time.Second
)

// deadlines sets each request's read and write deadlines on its connection (the node's server
// bounds the headers itself, with ReadHeaderTimeout, and idle connections).
func deadlines(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		now := time.Now()
		rc := http.NewResponseController(w)
		_ = rc.SetReadDeadline(now.Add(readTimeout))
		write := writeTimeout
		if secs, ok := profileSeconds(r); ok && secs > 0 {
			write += time.Duration(min(secs, MaxProfileSeconds)) * time.Second
		}
		_ = rc.SetWriteDeadline(now.Add(write))
		next.ServeHTTP(w, r)
	})
}

// profileSeconds is r's pprof seconds parameter, if it has one (ok false without; secs -1 for
// one that is not a number).
func profileSeconds(r *http.Request) (secs int, ok bool) {
	v := r.URL.Query().Get("seconds")
	if v == "" {
		return 0, false
	}
	n, err := strconv.Atoi(v)
	if err != nil {
		return -1, true
	}
	return n, true
}

// profiling refuses a seconds parameter over MaxProfileSeconds (or not a positive number) with
// 400, before pprof starts anything.
func profiling(next http.HandlerFunc) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if secs, ok := profileSeconds(r); ok && (secs <= 0 || secs > MaxProfileSeconds) {
			http.Error(w, "seconds must be a whole number from 1 to "+strconv.Itoa(MaxProfileSeconds)+
				" (the admin listener's cap; take a longer profile as several)", http.StatusBadRequest)
			return
		}
		next(w, r)
	})
}

// costly says whether r starts work that runs on after it is made — a CPU profile, an
// execution trace, a delta profile — which the guard treats as a change: a browser must not be
// able to start one across sites.
func costly(r *http.Request) bool {
	if _, ok := profileSeconds(r); ok {
		return true
	}
	switch r.URL.Path {
	case "/debug/pprof/profile", "/debug/pprof/trace":
		return true
	}
	return false
}
