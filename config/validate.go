package config

import (
	"errors"
	"fmt"
	"math"
	"net"
	"strconv"
	"strings"
)

// Connectors are the KV connector names engines may use: the registry the router runs with
// (transport/kv's Registry is one).
type Connectors interface {
	Has(name string) bool
	// Names lists them, sorted: what a message about an unknown one allows.
	Names() []string
}

// Validate checks every value, and every engine's kv.connector against connectors (the registry
// the router runs with; nil checks no name), and reports all problems at once, each naming its
// line when c came from Parse or Load. Provisioning runs it (node.Provision); call it directly
// to check a configuration built in Go.
func (c *Config) Validate(connectors Connectors) error {
	ck := &checker{lines: c.lines, connectors: connectors}
	c.check(ck)
	return errors.Join(ck.errs...)
}

type checker struct {
	lines map[string]int
	skip  map[string]bool // paths already reported by the parser
	// failed are the paths reported so far, so that a general check (checkFinite) does not
	// report again a value a key's own check refused.
	failed map[string]bool
	// connectors are the names engines' connectors are checked against; nil while parsing,
	// which cannot know the registry the file will run with (Validate checks them).
	connectors Connectors
	errs       []error
}

// fail records a problem at path; the message says what is wrong and what is allowed.
func (ck *checker) fail(path, format string, args ...any) {
	if ck.skipped(path) {
		return
	}
	if ck.failed == nil {
		ck.failed = map[string]bool{}
	}
	ck.failed[path] = true
	msg := fmt.Sprintf(format, args...)
	if line := ck.line(path); line > 0 {
		ck.errs = append(ck.errs, fmt.Errorf("line %d: %s: %s", line, path, msg))
		return
	}
	ck.errs = append(ck.errs, fmt.Errorf("%s: %s", path, msg))
}

// skipped reports whether path or a parent of it was already reported.
func (ck *checker) skipped(path string) bool {
	for p := path; p != ""; {
		if ck.skip[p] {
			return true
		}
		i := strings.LastIndexAny(p, ".[")
		if i < 0 {
			break
		}
		p = p[:i]
	}
	return false
}

// line finds the line of path, or of its closest parent that appeared in the file.
func (ck *checker) line(path string) int {
	for p := path; p != ""; {
		if l, ok := ck.lines[p]; ok {
			return l
		}
		i := strings.LastIndexAny(p, ".[")
		if i < 0 {
			break
		}
		p = p[:i]
	}
	return 0
}

// MaxSeconds is the longest duration any *_s key (and X-Narwhal-Deadline-S) accepts: one year.
// Anything longer is a typo, and far longer values overflow a time.Duration (about 292 years)
// into a negative one, which would make every request time out at once.
const MaxSeconds = 365 * 24 * 3600

// finite reports whether v is a number a duration can be made of: not NaN, not ±Inf.
func finite(v float64) bool { return !math.IsNaN(v) && !math.IsInf(v, 0) }

func (ck *checker) positive(path string, v Seconds) {
	if f := float64(v); !finite(f) || f <= 0 || f > MaxSeconds {
		ck.fail(path, "%v is not allowed; want a number of seconds greater than 0 and at most %d (one year)", f, MaxSeconds)
	}
}

func (ck *checker) nonNegative(path string, v Seconds) {
	if f := float64(v); !finite(f) || f < 0 || f > MaxSeconds {
		ck.fail(path, "%v is not allowed; want a number of seconds from 0 to %d (one year)", f, MaxSeconds)
	}
}

// hostPort checks a host:port address; a listener (listen) may use port 0, any free port.
func (ck *checker) hostPort(path, v string, listen bool) {
	_, port, err := net.SplitHostPort(v)
	if err != nil || port == "" {
		ck.fail(path, "%q is not an address; write host:port (e.g. 127.0.0.1:8001 or :8000)", v)
		return
	}
	ck.port(path, v, port, listen)
}

// port checks the port of the address or URL v.
func (ck *checker) port(path, v, port string, listen bool) {
	lo, allowed := 1, "a port from 1 to 65535"
	if listen {
		lo, allowed = 0, "a port from 0 (any free port) to 65535"
	}
	n, err := strconv.Atoi(port)
	switch {
	case err != nil:
		ck.fail(path, "%q has port %q; want %s", v, port, allowed)
	case n < lo || n > 65535:
		ck.fail(path, "%q has port %d; want %s", v, n, allowed)
	}
}

func (ck *checker) oneOf(path, v string, allowed ...string) {
	for _, a := range allowed {
		if v == a {
			return
		}
	}
	ck.fail(path, "%q is not allowed (allowed: %s)", v, strings.Join(allowed, ", "))
}

// check records every problem of c in ck: each section checks itself, in the file's order; the
// checks that span sections (engines against discovery and the listeners, secrets, listener
// collisions, finite numbers) are Config's own.
func (c *Config) check(ck *checker) {
	c.Server.checkListening(ck)
	ck.checkSecrets(c)
	c.Server.checkLimits(ck)
	c.Request.check(ck)
	c.Admission.check(ck)
	c.FlowControl.check(ck)
	c.Engine.check(ck)
	c.Handoff.check(ck)
	c.Disaggregation.check(ck)
	c.Placement.check(ck)
	c.Recovery.check(ck)
	c.EngineContract.check(ck)
	c.Preflight.check(ck)
	c.validateEngines(ck)
	c.Metrics.check(ck)
	c.Tracing.check(ck)
	c.Log.check(ck)
	c.Cluster.check(ck)
	c.Discovery.check(ck)
	c.checkListeners(ck)
	ck.checkFinite(c) // last: after every key's own check
}
