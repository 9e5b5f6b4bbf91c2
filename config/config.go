// Package config owns Narwhal's YAML contract: the types every other package reads, their
// documented defaults, strict parsing (an unknown key is an error naming the key and its line),
// `${NAME}` environment expansion and validation with messages that say what is allowed.
//
// Durations are written in seconds (`*_s` keys, fractions allowed) because that is how operators
// read dashboards; the Go side reads them through Seconds.Duration.
package config

import (
	"fmt"
	"strconv"
	"time"

	"github.com/narwhal-router/narwhal/transport/kv"
)

// Config is the whole configuration file. The zero value is not useful: call Default or Load.
type Config struct {
	Server         Server          `yaml:"server"`
	Request        Request         `yaml:"request"`
	Admission      Admission       `yaml:"admission"`
	Engine         EngineTimeouts  `yaml:"engine"`
	Handoff        Handoff         `yaml:"handoff"`
	Disaggregation Disaggregation  `yaml:"disaggregation"`
	Placement      Placement       `yaml:"placement"`
	Recovery       Recovery        `yaml:"recovery"`
	EngineContract *EngineContract `yaml:"engine_contract"`
	Preflight      Preflight       `yaml:"preflight"`
	Engines        []Engine        `yaml:"engines"`
	Metrics        Metrics         `yaml:"metrics"`
	Tracing        Tracing         `yaml:"tracing"`
	Log            Log             `yaml:"log"`
	Cluster        Cluster         `yaml:"cluster"`
	Discovery      Discovery       `yaml:"discovery"`

	// lines maps each key path the file set to its line (Parse fills it), so that problems
	// found later (Provision) still name their line.
	lines map[string]int
}

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
	// (0: derived from the memory limit, config/budget.go).
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

// Request bounds one client request end to end, retries included.
type Request struct {
	DeadlineS Seconds `yaml:"deadline_s"`
}

// Admission bounds how many requests may wait for an engine slot and for how long.
type Admission struct {
	MaxQueue      int     `yaml:"max_queue"`
	QueueTimeoutS Seconds `yaml:"queue_timeout_s"`
}

// EngineTimeouts are the engine legs' timeouts and the bounds on what a leg may hold.
type EngineTimeouts struct {
	PrefillTimeoutS    Seconds `yaml:"prefill_timeout_s"`
	FirstTokenTimeoutS Seconds `yaml:"first_token_timeout_s"`
	// DecodeReadTimeoutS bounds silence between stream chunks after the first token; 0 leaves
	// the stream bounded by the request deadline alone.
	DecodeReadTimeoutS Seconds `yaml:"decode_read_timeout_s"`
	// ConnectTimeoutS bounds a TCP connect to an engine; it is also capped by the leg budget.
	ConnectTimeoutS Seconds `yaml:"connect_timeout_s"`
	// ModelsTimeoutS bounds one GET /v1/models asked of an engine without configured models.
	ModelsTimeoutS Seconds `yaml:"models_timeout_s"`
	// IdleConnTimeoutS drops pooled engine connections idle for longer than this. Keep it below
	// the engine's own keep-alive timeout (uvicorn's default is 5 s) so a request never lands on
	// a connection the engine is closing.
	IdleConnTimeoutS Seconds `yaml:"idle_conn_timeout_s"`
	// PassthroughTimeoutS bounds a passthrough request (embeddings, tokenize, score, rerank)
	// from connect to the last byte of the engine's answer.
	PassthroughTimeoutS Seconds `yaml:"passthrough_timeout_s"`
	// MaxHeldBytes and MaxHeldEvents bound what a decode leg may send before its first
	// generated token (it is held until commit); SSE comments do not count (past 1 KiB of
	// them, they are dropped).
	MaxHeldBytes  int `yaml:"max_held_bytes"`
	MaxHeldEvents int `yaml:"max_held_events"`
}

// Handoff governs the KV handoff descriptor between the legs.
type Handoff struct {
	MaxAgeS   Seconds `yaml:"max_age_s"`
	OnMissing string  `yaml:"on_missing"`
}

// Handoff.OnMissing values.
const (
	OnMissingRecompute = "recompute"
	OnMissingFail      = "fail"
)

// Disaggregation decides, per request, between the prefill/decode path (a prefill leg on a
// producer, a KV transfer, decode on a consumer) and same-worker decode (the consumer computes
// the prompt itself; no prefill leg, no transfer). docs/configuration.md explains each rule.
type Disaggregation struct {
	// Policy is always, never or auto (the rules below).
	Policy string `yaml:"policy"`
	// MinPromptTokens: under auto, a prompt estimated below this many tokens, or whose part
	// the consumer is not likely to hold in its prefix cache is below it, decodes on the
	// consumer alone.
	MinPromptTokens int `yaml:"min_prompt_tokens"`
	// PrefillSaturation: under auto, when every producer is at least this busy (a fraction of
	// its max_inflight, or its scraped KV usage; 1 once it has requests waiting) and the
	// consumer is less busy than DecodeHeadroom, the consumer decodes alone.
	PrefillSaturation float64 `yaml:"prefill_saturation"`
	DecodeHeadroom    float64 `yaml:"decode_headroom"`
	// MaxLocalPromptTokens bounds the saturation rule, which decides until the router has
	// measured a prefill rate: a prompt whose uncached part is estimated above it still waits
	// for a producer, since computing it on the consumer would stall every stream decoding
	// there. Once rates are measured, LocalStallBudgetS bounds it instead, in time.
	MaxLocalPromptTokens int `yaml:"max_local_prompt_tokens"`
	// LocalStallBudgetS: under auto, once the router has measured prefill rates, a long prompt
	// is computed on its consumer only when its first token is predicted sooner there than
	// through a producer and the prompts the consumer is computing for us, this one included,
	// are predicted done within this many seconds: the longest the streams decoding there are
	// held up by them. 0 turns the prediction off: the saturation rule keeps deciding.
	LocalStallBudgetS Seconds `yaml:"local_stall_budget_s"`
}

// Disaggregation policies.
const (
	DisaggAlways = "always"
	DisaggNever  = "never"
	DisaggAuto   = "auto"
)

// Placement is how engines are chosen for each leg, and where the router learns their load.
type Placement struct {
	// Policy is prefix (longest cached prefix, bounded by load), p2c (power of two choices on
	// load) or round_robin.
	Policy string `yaml:"policy"`
	// PrefixBlockWords is the prefix index's block: this many whitespace-separated words of
	// prompt text hash into one block.
	PrefixBlockWords int `yaml:"prefix_block_words"`
	// PrefixIndexBlocks bounds the prefix index: the block hashes it remembers.
	PrefixIndexBlocks int `yaml:"prefix_index_blocks"`
	// LoadFactor bounds prefix preference: an engine whose load would exceed this multiple of
	// the candidates' mean load is not preferred for its cache.
	LoadFactor float64 `yaml:"load_factor"`
	// ScrapeIntervalS is how often every engine's /metrics is read (0: never; load is the
	// router's own reservations alone); a scrape older than ScrapeStaleS is ignored.
	ScrapeIntervalS Seconds `yaml:"scrape_interval_s"`
	ScrapeStaleS    Seconds `yaml:"scrape_stale_s"`
	ScrapeTimeoutS  Seconds `yaml:"scrape_timeout_s"`
	// KVEvents is where the router follows the engines' KV cache events, for an exact prefix
	// index.
	KVEvents KVEvents `yaml:"kv_events"`
}

// KVEvents is the router's side of vLLM's --kv-events-config: the endpoints each engine's
// ZeroMQ publisher and replay socket listen on, fleet-wide as patterns ({host} is the engine
// URL's host), overridden per engine by engines[].kv_events.
type KVEvents struct {
	// Endpoint is the PUB endpoint pattern (tcp://{host}:5557); "" follows no engine that
	// does not name its own.
	Endpoint string `yaml:"endpoint"`
	// ReplayEndpoint is the replay (ROUTER) endpoint pattern; "" asks no engine for a gap.
	ReplayEndpoint string `yaml:"replay_endpoint"`
	// Topic is the topic prefix subscribed to ("" takes every topic).
	Topic string `yaml:"topic"`
	// MaxBlocks bounds the exact index: (engine, block) pairs held in all.
	MaxBlocks int `yaml:"max_blocks"`
	// ReplayTimeoutS bounds one replay; ReconnectS is the first wait before following a
	// stream again after it broke (doubling, up to 30 s).
	ReplayTimeoutS Seconds `yaml:"replay_timeout_s"`
	ReconnectS     Seconds `yaml:"reconnect_s"`
}

// KVEventsOff, as an engine's kv_events.endpoint, follows no events from it whatever the
// fleet-wide pattern says.
const KVEventsOff = "off"

// EngineKVEvents are one engine's KV event endpoints, overriding placement.kv_events' patterns.
type EngineKVEvents struct {
	Endpoint       string `yaml:"endpoint"`
	ReplayEndpoint string `yaml:"replay_endpoint"`
}

// Placement policies.
const (
	PlacePrefix     = "prefix"
	PlaceP2C        = "p2c"
	PlaceRoundRobin = "round_robin"
)

// Recovery holds retries, the retry budget, breakers and probing.
type Recovery struct {
	MaxAttempts        int         `yaml:"max_attempts"`
	RetryBudget        RetryBudget `yaml:"retry_budget"`
	EjectAfter         int         `yaml:"eject_after"`
	FailureQuarantineS Seconds     `yaml:"failure_quarantine_s"`
	ProbeIntervalS     Seconds     `yaml:"probe_interval_s"`
	ProbeMaxIntervalS  Seconds     `yaml:"probe_max_interval_s"`
	// BlameWindowS is how far back failures are compared to tell a request's failure or a
	// producer's bad handoffs from an engine's own, and how long such a failure waits for the
	// evidence (the engine committing other requests) before it counts against the engine.
	BlameWindowS Seconds `yaml:"blame_window_s"`
	// Backpressure bounds how long an engine that only answers 429/503 keeps its placements.
	Backpressure Backpressure `yaml:"backpressure"`
	// Readmission is what readmits an ejected engine: ReadmissionProbe (a real inference
	// probe, the default) or ReadmissionHealth (a successful GET /health; development only).
	Readmission string `yaml:"readmission"`
}

// Backpressure is recovery.backpressure: an engine that answered nothing but 429/503 for
// longer than BoundS is passed over by placement for its Retry-After (at most MaxPassS), or for
// PassS when it sent none. Backpressure never counts against the breaker.
type Backpressure struct {
	BoundS   Seconds `yaml:"bound_s"`
	PassS    Seconds `yaml:"pass_s"`
	MaxPassS Seconds `yaml:"max_pass_s"`
}

// Readmission modes.
const (
	ReadmissionProbe  = "probe"
	ReadmissionHealth = "health"
)

// RetryBudget lets retries add at most Ratio of the requests seen in the last WindowS seconds,
// plus MinPerS retries per second that are always allowed (Finagle's retry budget).
type RetryBudget struct {
	Ratio   float64 `yaml:"ratio"`
	MinPerS float64 `yaml:"min_per_s"`
	WindowS Seconds `yaml:"window_s"`
}

// EngineContract pins what every engine must be; readmission and preflight check it.
type EngineContract struct {
	Model       string `yaml:"model"`
	MaxModelLen int    `yaml:"max_model_len"`
	Version     string `yaml:"version"`
	Connector   string `yaml:"connector"`
}

// Preflight configures the contract check and KV transfer matrix (`narwhal preflight`, and
// `narwhal serve` with Require all).
type Preflight struct {
	// Concurrency bounds how many producer→consumer probes run at once.
	Concurrency int `yaml:"concurrency"`
	// Require is what `narwhal serve` demands before it listens: RequireNone (start at once;
	// each engine joins after its own check) or RequireAll (the whole matrix must pass).
	Require string `yaml:"require"`
}

// Preflight requirements.
const (
	RequireNone = "none"
	RequireAll  = "all"
)

// Role says which legs an engine may run.
type Role string

// Engine roles.
const (
	RolePrefill Role = "prefill"
	RoleDecode  Role = "decode"
	RoleBoth    Role = "both"
)

// CanPrefill reports whether the role may run the prefill leg.
func (r Role) CanPrefill() bool { return r == RolePrefill || r == RoleBoth }

// CanDecode reports whether the role may run the decode leg.
func (r Role) CanDecode() bool { return r == RoleDecode || r == RoleBoth }

// Engine is one vLLM-compatible server behind the router.
type Engine struct {
	Name string `yaml:"name"`
	URL  string `yaml:"url"`
	Role Role   `yaml:"role"`
	// MaxInflight caps the phase reservations held on the engine at once (both phases
	// together); 0 means no cap.
	MaxInflight int      `yaml:"max_inflight"`
	Models      []string `yaml:"models"`
	APIKey      string   `yaml:"api_key,omitempty"`
	KV          KV       `yaml:"kv"`
	// KVEvents names the engine's own KV event endpoints (placement.kv_events has the
	// fleet's patterns).
	KVEvents EngineKVEvents `yaml:"kv_events"`
}

// KV describes an engine's side of the KV transfer.
type KV struct {
	Connector string `yaml:"connector"`
	// EngineID pins the identity the producer must advertise (a `_dp<N>` suffix is accepted).
	EngineID string `yaml:"engine_id"`
	// Endpoint pins the host:port the producer must advertise for its KV side channel.
	Endpoint string `yaml:"endpoint"`
	// TransferModes lists the `transfer_mode` values this engine accepts as a consumer.
	TransferModes []string `yaml:"transfer_modes"`
	// AllowedEndpoints, when set, is where an unpinned producer may point consumers for the KV
	// transfer: CIDRs (10.0.0.0/8) or exact host:port entries. Unset, the KV host must be the
	// producer's own host (from its url).
	AllowedEndpoints []string `yaml:"allowed_endpoints"`
	// AllowedPorts are the ports an unpinned producer's descriptor may name on its own host (or
	// on a host an allowed_endpoints CIDR covers): "5600" or "5600-5663" entries; none: the
	// range vLLM's NIXL connector listens on (transport/kv DefaultAllowedPorts). The router's
	// own listener ports are never allowed there.
	AllowedPorts []string `yaml:"allowed_ports"`
}

// Metrics configures the tally reporters.
type Metrics struct {
	Statsd *Statsd `yaml:"statsd"`
}

// Statsd sends metrics to a statsd daemon over UDP.
type Statsd struct {
	Address        string  `yaml:"address"`
	Prefix         string  `yaml:"prefix"`
	FlushIntervalS Seconds `yaml:"flush_interval_s"`
}

// Tracing exports OpenTelemetry spans of client requests over OTLP (docs/configuration.md,
// "tracing"). It is off while OTLPEndpoint is empty.
type Tracing struct {
	// OTLPEndpoint is the collector's URL: http://host:port (no TLS) or https://host:port; with
	// the http protocol a path may follow (default /v1/traces).
	OTLPEndpoint string `yaml:"otlp_endpoint"`
	// Protocol is grpc (OTLP/gRPC, port 4317 by convention) or http (OTLP/HTTP protobuf, 4318).
	Protocol string `yaml:"protocol"`
	// SampleRatio is the fraction of requests without a sampled parent that are traced; a
	// client's traceparent decides for its own request.
	SampleRatio float64 `yaml:"sample_ratio"`
	// ServiceName is the service.name resource attribute.
	ServiceName string `yaml:"service_name"`
	// Headers are sent with every export (a collector's or vendor's authentication, a tenant).
	Headers []TracingHeader `yaml:"headers"`
}

// TracingHeader is one header of every trace export.
type TracingHeader struct {
	Name  string `yaml:"name"`
	Value string `yaml:"value"`
}

// Tracing protocols.
const (
	TracingGRPC = "grpc"
	TracingHTTP = "http"
)

// Log configures the process log and the access log.
type Log struct {
	Level     string `yaml:"level"`
	Format    string `yaml:"format"`
	AccessLog bool   `yaml:"access_log"`
	// AccessLogFlushS is how often the buffered access log is written out: the request path
	// never waits on a write, and a line appears at most this long after its request ended.
	AccessLogFlushS Seconds `yaml:"access_log_flush_s"`
}

// Seconds is a duration written as (possibly fractional) seconds.
type Seconds float64

// Duration converts s to a time.Duration.
func (s Seconds) Duration() time.Duration { return time.Duration(float64(s) * float64(time.Second)) }

// Default returns the documented defaults (docs/configuration.md lists them).
func Default() Config {
	return Config{
		Server: Server{
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
		},
		Request:   Request{DeadlineS: 600},
		Admission: Admission{MaxQueue: 10000, QueueTimeoutS: 5},
		Engine: EngineTimeouts{
			PrefillTimeoutS:    60,
			FirstTokenTimeoutS: 60,
			DecodeReadTimeoutS: 30,
			ConnectTimeoutS:    5,
			ModelsTimeoutS:     5,
			IdleConnTimeoutS:   4,

			PassthroughTimeoutS: 60,
			MaxHeldBytes:        4 << 20,
			MaxHeldEvents:       256,
		},
		Handoff: Handoff{MaxAgeS: 30, OnMissing: OnMissingRecompute},
		Disaggregation: Disaggregation{Policy: DisaggAuto, MinPromptTokens: 256,
			PrefillSaturation: 0.9, DecodeHeadroom: 0.7, MaxLocalPromptTokens: 1024,
			LocalStallBudgetS: 0.25},
		Placement: Placement{Policy: PlacePrefix, PrefixBlockWords: 64, PrefixIndexBlocks: 1 << 18,
			LoadFactor: 1.25, ScrapeIntervalS: 0, ScrapeStaleS: 5, ScrapeTimeoutS: 1,
			KVEvents: KVEvents{MaxBlocks: 1 << 20, ReplayTimeoutS: 2, ReconnectS: 1}},
		Recovery: Recovery{
			MaxAttempts:       1,
			RetryBudget:       RetryBudget{Ratio: 0.1, MinPerS: 5, WindowS: 10},
			EjectAfter:        3,
			ProbeIntervalS:    5,
			ProbeMaxIntervalS: 60,
			BlameWindowS:      5,
			Backpressure:      Backpressure{BoundS: 1, PassS: 2, MaxPassS: 30},
			Readmission:       ReadmissionProbe,
		},
		Preflight: Preflight{Concurrency: 4, Require: RequireNone},
		Tracing:   Tracing{Protocol: TracingGRPC, SampleRatio: 1, ServiceName: "narwhal"},
		Log:       Log{Level: "info", Format: "json", AccessLog: true, AccessLogFlushS: 0.2},
		Cluster:   defaultCluster(),
		Discovery: defaultDiscovery(),
	}
}

// applyDefaults fills the per-engine defaults that depend on nothing else.
func (e *Engine) applyDefaults() {
	if e.KV.Connector == "" {
		e.KV.Connector = kv.Default
	}
	if len(e.KV.TransferModes) == 0 {
		e.KV.TransferModes = []string{"pull"}
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
