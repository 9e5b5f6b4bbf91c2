package config

import (
	"fmt"
	"strconv"
)

// Server configures the client listener and the admin listener.
type Server struct {
	Listen               string  `yaml:"listen"`
	AdminListen          string  `yaml:"admin_listen"`
	AdminToken           string  `yaml:"admin_token,omitempty"`
	MaxBodyBytes         int     `yaml:"max_body_bytes"`
	ExposeRoutingHeaders bool    `yaml:"expose_routing_headers"`
	ShutdownGraceS       Seconds `yaml:"shutdown_grace_s"`
	// DrainDelayS is how long, after SIGTERM, the client listener keeps accepting while
	// /readyz already answers 503, so that load balancers stop sending before it closes.
	DrainDelayS Seconds `yaml:"drain_delay_s"`
	// HeaderTimeoutS bounds how long a client may take to send its request line, headers and
	// body. It never applies to responses, which stream for as long as the engine generates.
	HeaderTimeoutS Seconds `yaml:"header_timeout_s"`
	// IdleTimeoutS closes client keep-alive connections idle for longer than this.
	IdleTimeoutS Seconds `yaml:"idle_timeout_s"`
	// AdminIdleTimeoutS closes admin keep-alive connections idle for longer than this, so a
	// scraper or tool that went away holds nothing.
	AdminIdleTimeoutS Seconds `yaml:"admin_idle_timeout_s"`
	// APIKeys are the client API keys (Authorization: Bearer); none configured means no
	// authentication. APIKeysFile names a file of more keys, one a line ('#' comments).
	APIKeys     []string `yaml:"api_keys"`
	APIKeysFile string   `yaml:"api_keys_file,omitempty"`
	// APIKeyMaxConcurrency bounds each key's requests in flight (0: unbounded); one more is
	// answered 429 with Retry-After.
	APIKeyMaxConcurrency int `yaml:"api_key_max_concurrency"`
	// MaxHeaderBytes bounds a request's line and headers together (431 past it).
	MaxHeaderBytes int `yaml:"max_header_bytes"`
	// ClientWriteTimeoutS bounds how long one write to a client may block (a client that stops
	// reading); the request deadline bounds a streamed response as a whole.
	ClientWriteTimeoutS Seconds `yaml:"client_write_timeout_s"`
	// MaxResponseBytes bounds the decode event data a non-streaming response is assembled from.
	MaxResponseBytes int `yaml:"max_response_bytes"`
	// MaxBufferedBytes bounds the client bodies and whole answers the process holds at once
	// (0: derived from the memory limit, transport/memory.Size).
	MaxBufferedBytes int64 `yaml:"max_buffered_bytes"`

	// ExposeEngineErrors relays an engine's in-stream error message to clients; off, they get
	// its status, type and code with a generic message (engine text can name internal hosts).
	ExposeEngineErrors bool `yaml:"expose_engine_errors"`

	// Procs is how many CPUs the Go scheduler runs the router on (GOMAXPROCS): "all" (every CPU
	// the process may use, the Go runtime's own choice), a number, or "auto" (sized to the load:
	// one while the router is lightly loaded, more as it gets busy). A GOMAXPROCS environment
	// variable overrides it.
	Procs string `yaml:"procs"`
}

func defaultServer() Server {
	return Server{
		Listen:         ":8000",
		AdminListen:    "127.0.0.1:8001",
		MaxBodyBytes:   8 << 20,
		ShutdownGraceS: 30,
		DrainDelayS:    5,
		HeaderTimeoutS: 30,
		IdleTimeoutS:   120,

		AdminIdleTimeoutS:   60,
		MaxHeaderBytes:      16 << 10,
		ClientWriteTimeoutS: 30,
		MaxResponseBytes:    64 << 20,
		Procs:               "all",
	}
}

// maxDrainDelay bounds server.drain_delay_s: load balancers notice a failing readiness check
// within seconds; minutes would only delay every shutdown.
const maxDrainDelay = 300

// checkListening records the problems of the listeners, their timeouts and the client keys.
func (s Server) checkListening(ck *checker) {
	ck.hostPort("server.listen", s.Listen, true)
	if s.AdminListen != "" {
		ck.hostPort("server.admin_listen", s.AdminListen, true)
	}
	if s.MaxBodyBytes <= 0 {
		ck.fail("server.max_body_bytes", "must be a byte count greater than 0, got %d", s.MaxBodyBytes)
	}
	ck.nonNegative("server.shutdown_grace_s", s.ShutdownGraceS)
	if f := float64(s.DrainDelayS); !finite(f) || f < 0 || f > maxDrainDelay {
		ck.fail("server.drain_delay_s", "%v is not allowed; want a number of seconds from 0 (close the listener at once) to %d", f, maxDrainDelay)
	}
	ck.positive("server.header_timeout_s", s.HeaderTimeoutS)
	ck.positive("server.idle_timeout_s", s.IdleTimeoutS)
	ck.positive("server.admin_idle_timeout_s", s.AdminIdleTimeoutS)
	ck.checkAPIKeys(s)
}

// checkLimits records the problems of the bounds on what a client may send and be sent, the
// memory budget and server.procs.
func (s Server) checkLimits(ck *checker) {
	if v := s.MaxHeaderBytes; v < 4096 || v > 1<<20 {
		ck.fail("server.max_header_bytes", "%d is not allowed; want a byte count from 4096 to 1048576", v)
	}
	ck.positive("server.client_write_timeout_s", s.ClientWriteTimeoutS)
	if v := s.MaxResponseBytes; v < 1 || v > 1<<30 {
		ck.fail("server.max_response_bytes", "%d is not allowed; want a byte count from 1 to 1073741824", v)
	}
	ck.checkBudget(s)
	if _, _, err := s.ProcsPolicy(); err != nil {
		ck.fail("server.procs", "%v", err)
	}
}

// maxProcs bounds server.procs: far more CPUs than a router could use.
const maxProcs = 1024

// ProcsPolicy reads server.procs: fixed is the CPU count a number sets (0 for "all" and
// "auto"), auto whether the scheduler is to be sized to the load.
func (s Server) ProcsPolicy() (fixed int, auto bool, err error) {
	switch s.Procs {
	case "", "all":
		return 0, false, nil
	case "auto":
		return 0, true, nil
	}
	n, err := strconv.Atoi(s.Procs)
	if err != nil || n < 1 || n > maxProcs {
		return 0, false, fmt.Errorf("%q is not allowed; want \"all\", \"auto\" or a CPU count from 1 to %d", s.Procs, maxProcs)
	}
	return n, false, nil
}

// The memory budget (server.max_buffered_bytes) bounds the request bodies and whole answers the
// router holds at once. Unset (0), transport/memory derives it from the memory limit the process
// runs under (memory.Size); set, it must be within these bounds.
const (
	minBufferBudget = 64 << 20
	maxBufferBudget = 1 << 40
)

func (ck *checker) checkBudget(s Server) {
	if v := s.MaxBufferedBytes; v != 0 && (v < minBufferBudget || v > maxBufferBudget) {
		ck.fail("server.max_buffered_bytes", "%d is not allowed; want 0 (derived from the memory limit) or a byte count from %d to %d", v, minBufferBudget, int64(maxBufferBudget))
	}
}
