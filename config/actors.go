package config

import (
	"strconv"
	"time"
)

// The actors' runtime forms. The request supervisors, the breakers, the retry budget and
// placement still read these few values converted, as a whole per request; they are built from
// the sections below (FleetRuntime, RequestRuntime, RecoveryRuntime) and go once the actors read
// their sections themselves. Nothing else reads them.

// FleetRuntime is disaggregation.* and placement.* as the actors read them.
type FleetRuntime struct {
	Disaggregation    string // always, never, auto
	MinPromptTokens   int
	PrefillSaturation float64
	DecodeHeadroom    float64
	MaxLocalPrompt    int
	LocalStallBudget  time.Duration

	Placement      string // prefix, p2c, round_robin
	BlockWords     int
	IndexBlocks    int
	LoadFactor     float64
	ScrapeInterval time.Duration // 0: no scraping
	ScrapeStale    time.Duration
	ScrapeTimeout  time.Duration
	KVEvents       KVEventsRuntime
	LoRAAffinity   bool
}

// KVEventsRuntime is placement.kv_events as the actors read it.
type KVEventsRuntime struct {
	// Endpoint and Replay are the fleet's patterns ({host}: the engine URL's host); "" none.
	Endpoint, Replay string
	Topic            string
	MaxBlocks        int
	ReplayTimeout    time.Duration
	Reconnect        time.Duration
}

// Endpoints are where to follow an engine's KV events (KVEvents.Endpoints): own is its
// engines[].kv_events, host its URL's host.
func (k KVEventsRuntime) Endpoints(own EngineKVEvents, host string) (pub, replay string) {
	return KVEvents{Endpoint: k.Endpoint, ReplayEndpoint: k.Replay}.Endpoints(own, host)
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

// RecoveryRuntime is recovery.* as the breakers and the retry budget read it.
type RecoveryRuntime struct {
	RetryBudget RetryBudgetRuntime
	EjectAfter  int
	// FailureQuarantine > 0 takes an engine out of placement for that long after a counted failure.
	FailureQuarantine time.Duration
	ProbeInterval     time.Duration
	ProbeMaxInterval  time.Duration
	// Readmission is ReadmissionProbe or ReadmissionHealth.
	Readmission string
	// BlameWindow is recovery.blame_window_s: the span of failures compared, and how long a
	// failure that looks like its request's (or its producer's) waits for evidence.
	BlameWindow time.Duration
	// Backpressure is recovery.backpressure.*.
	Backpressure BackpressureRuntime
}

// BackpressureRuntime is recovery.backpressure: an engine answering only 429/503 for longer than
// Bound is passed over for its Retry-After (at most MaxPass), or for Pass without one.
type BackpressureRuntime struct {
	Bound, Pass, MaxPass time.Duration
}

// ReadmitByHealth says an ejected engine is readmitted by a health check (recovery.readmission:
// health), not by an inference probe.
func (r RecoveryRuntime) ReadmitByHealth() bool { return r.Readmission == ReadmissionHealth }

// RetryBudgetRuntime is recovery.retry_budget: retries may add Ratio of the requests of the last
// Window, plus MinPerS a second.
type RetryBudgetRuntime struct {
	Ratio   float64
	MinPerS float64
	Window  time.Duration
}

// FleetRuntime is c's disaggregation and placement sections as the actors read them.
func (c Config) FleetRuntime() FleetRuntime {
	d, p, k := c.Disaggregation, c.Placement, c.Placement.KVEvents
	return FleetRuntime{
		Disaggregation: d.Policy, MinPromptTokens: d.MinPromptTokens, PrefillSaturation: d.PrefillSaturation,
		DecodeHeadroom: d.DecodeHeadroom, MaxLocalPrompt: d.MaxLocalPromptTokens, LocalStallBudget: d.LocalStallBudgetS.Duration(),
		Placement: p.Policy, BlockWords: p.PrefixBlockWords, IndexBlocks: p.PrefixIndexBlocks, LoadFactor: p.LoadFactor,
		ScrapeInterval: p.ScrapeIntervalS.Duration(), ScrapeStale: p.ScrapeStaleS.Duration(), ScrapeTimeout: p.ScrapeTimeoutS.Duration(),
		KVEvents: KVEventsRuntime{Endpoint: k.Endpoint, Replay: k.ReplayEndpoint, Topic: k.Topic, MaxBlocks: k.MaxBlocks,
			ReplayTimeout: k.ReplayTimeoutS.Duration(), Reconnect: k.ReconnectS.Duration()},
		LoRAAffinity: p.LoRAAffinity,
	}
}

// RequestRuntime is c's request, admission and handoff sections, and the retry bound, as a
// request supervisor reads them.
func (c Config) RequestRuntime() RequestRuntime {
	return RequestRuntime{
		Deadline:      c.Request.DeadlineS.Duration(),
		MaxQueue:      c.Admission.MaxQueue,
		QueueTimeout:  c.Admission.QueueTimeoutS.Duration(),
		MaxHandoffAge: c.Handoff.MaxAgeS.Duration(),
		FailOnMissing: c.Handoff.OnMissing == OnMissingFail,
		MaxAttempts:   c.Recovery.MaxAttempts,
		RetryAfter:    strconv.Itoa(max(1, int(c.Recovery.ProbeIntervalS))),
	}
}

// RecoveryRuntime is c's recovery section as the breakers and the retry budget read it.
func (c Config) RecoveryRuntime() RecoveryRuntime {
	r := c.Recovery
	return RecoveryRuntime{
		RetryBudget: RetryBudgetRuntime{Ratio: r.RetryBudget.Ratio, MinPerS: r.RetryBudget.MinPerS,
			Window: r.RetryBudget.WindowS.Duration()},
		EjectAfter:        r.EjectAfter,
		FailureQuarantine: r.FailureQuarantineS.Duration(),
		ProbeInterval:     r.ProbeIntervalS.Duration(),
		ProbeMaxInterval:  r.ProbeMaxIntervalS.Duration(),
		BlameWindow:       r.BlameWindowS.Duration(),
		Backpressure: BackpressureRuntime{Bound: r.Backpressure.BoundS.Duration(),
			Pass: r.Backpressure.PassS.Duration(), MaxPass: r.Backpressure.MaxPassS.Duration()},
		Readmission: r.Readmission,
	}
}
