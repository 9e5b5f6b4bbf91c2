package config

import (
	"strconv"
	"time"
)

// Runtime is a configuration provisioned for running: read once at startup, every duration a
// time.Duration and every derived value computed, so that nothing on a per-request or per-event
// path converts YAML values. The YAML types above stay the contract with operators; Runtime is
// what the running router reads.
type Runtime struct {
	Server  ServerRuntime
	Engine  EngineTimings
	Request RequestRuntime
}

// ServerRuntime is the client listener's provisioned settings.
type ServerRuntime struct {
	MaxBodyBytes         int
	HeaderTimeout        time.Duration
	IdleTimeout          time.Duration
	ShutdownGrace        time.Duration
	ExposeRoutingHeaders bool
}

// EngineTimings are the engine-leg bounds (engine.* in the file).
type EngineTimings struct {
	Prefill    time.Duration
	FirstToken time.Duration
	// DecodeRead bounds silence between chunks after the first token; 0: the request
	// deadline alone bounds the stream.
	DecodeRead time.Duration
	Connect    time.Duration
	IdleConn   time.Duration
}

// RequestRuntime is what a request supervisor reads for every request.
type RequestRuntime struct {
	Deadline time.Duration
	// MaxQueue and QueueTimeout bound the admission queue (admission.*).
	MaxQueue     int
	QueueTimeout time.Duration
	// MaxHandoffAge is handoff.max_age_s; FailOnMissing is handoff.on_missing: fail.
	MaxHandoffAge time.Duration
	FailOnMissing bool
	MaxAttempts   int
	// RetryAfter is the Retry-After of a 503 the router makes itself: the probe interval in
	// whole seconds, at least 1.
	RetryAfter string
}

// Provision reads c into its runtime form. c must be valid (Validate).
func Provision(c Config) Runtime {
	return Runtime{
		Server: ServerRuntime{
			MaxBodyBytes:         c.Server.MaxBodyBytes,
			HeaderTimeout:        c.Server.HeaderTimeoutS.Duration(),
			IdleTimeout:          c.Server.IdleTimeoutS.Duration(),
			ShutdownGrace:        c.Server.ShutdownGraceS.Duration(),
			ExposeRoutingHeaders: c.Server.ExposeRoutingHeaders,
		},
		Engine: c.Engine.Provision(),
		Request: RequestRuntime{
			Deadline:      c.Request.DeadlineS.Duration(),
			MaxQueue:      c.Admission.MaxQueue,
			QueueTimeout:  c.Admission.QueueTimeoutS.Duration(),
			MaxHandoffAge: c.Handoff.MaxAgeS.Duration(),
			FailOnMissing: c.Handoff.OnMissing == OnMissingFail,
			MaxAttempts:   c.Recovery.MaxAttempts,
			RetryAfter:    strconv.Itoa(max(1, int(c.Recovery.ProbeIntervalS))),
		},
	}
}

// Provision reads the engine timeouts into durations.
func (t EngineTimeouts) Provision() EngineTimings {
	return EngineTimings{
		Prefill:    t.PrefillTimeoutS.Duration(),
		FirstToken: t.FirstTokenTimeoutS.Duration(),
		DecodeRead: t.DecodeReadTimeoutS.Duration(),
		Connect:    t.ConnectTimeoutS.Duration(),
		IdleConn:   t.IdleConnTimeoutS.Duration(),
	}
}
