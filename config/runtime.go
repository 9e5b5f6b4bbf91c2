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
	Fleet   FleetRuntime
}

// FleetRuntime is disaggregation.* and placement.* provisioned.
type FleetRuntime struct {
	Disaggregation    string // always, never, auto
	MinPromptTokens   int
	PrefillSaturation float64
	DecodeHeadroom    float64
	MaxLocalPrompt    int

	Placement      string // prefix, p2c, round_robin
	BlockWords     int
	IndexBlocks    int
	LoadFactor     float64
	ScrapeInterval time.Duration // 0: no scraping
	ScrapeStale    time.Duration
	ScrapeTimeout  time.Duration
}

// ServerRuntime is the client listener's provisioned settings.
type ServerRuntime struct {
	MaxBodyBytes         int
	HeaderTimeout        time.Duration
	IdleTimeout          time.Duration
	ShutdownGrace        time.Duration
	ExposeRoutingHeaders bool
	MaxHeaderBytes       int
	ClientWriteTimeout   time.Duration
	MaxResponseBytes     int
	ExposeEngineErrors   bool
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
	// Passthrough bounds a whole passthrough request (embeddings, tokenize, score, rerank).
	Passthrough time.Duration
	// MaxHeldBytes and MaxHeldEvents bound what is held before the first token.
	MaxHeldBytes  int
	MaxHeldEvents int
	// MaxResponseBytes bounds a passthrough answer (server.max_response_bytes).
	MaxResponseBytes int
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
			MaxHeaderBytes:       c.Server.MaxHeaderBytes,
			ClientWriteTimeout:   c.Server.ClientWriteTimeoutS.Duration(),
			MaxResponseBytes:     c.Server.MaxResponseBytes,
			ExposeEngineErrors:   c.Server.ExposeEngineErrors,
		},
		Engine: c.Engine.Provision(),
		Fleet: FleetRuntime{
			Disaggregation: c.Disaggregation.Policy, MinPromptTokens: c.Disaggregation.MinPromptTokens,
			PrefillSaturation: c.Disaggregation.PrefillSaturation, DecodeHeadroom: c.Disaggregation.DecodeHeadroom,
			MaxLocalPrompt: c.Disaggregation.MaxLocalPromptTokens,
			Placement:      c.Placement.Policy, BlockWords: c.Placement.PrefixBlockWords,
			IndexBlocks: c.Placement.PrefixIndexBlocks, LoadFactor: c.Placement.LoadFactor,
			ScrapeInterval: c.Placement.ScrapeIntervalS.Duration(), ScrapeStale: c.Placement.ScrapeStaleS.Duration(),
			ScrapeTimeout: c.Placement.ScrapeTimeoutS.Duration(),
		},
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

		Passthrough: t.PassthroughTimeoutS.Duration(),
		// Zero (a configuration built by hand) takes the documented defaults.
		MaxHeldBytes:     orDefault(t.MaxHeldBytes, 4<<20),
		MaxHeldEvents:    orDefault(t.MaxHeldEvents, 256),
		MaxResponseBytes: orDefault(t.MaxResponseBytes, 64<<20),
	}
}

func orDefault(v, def int) int {
	if v <= 0 {
		return def
	}
	return v
}
