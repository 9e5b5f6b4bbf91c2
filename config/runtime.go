package config

import (
	"errors"
	"fmt"
	"log/slog"
	"net/url"
	"reflect"
	"strconv"
	"strings"
	"time"

	"github.com/narwhal-router/narwhal/transport/kv"
)

// Runtime is a configuration provisioned for running: validated, every duration a
// time.Duration, every secret file read, every engine's URL parsed and its connector resolved,
// every derived value computed. It is made once by Provision and never changed: the router,
// ingress, the engine clients, the breakers and the cluster each take the piece they need, and
// nothing converts a YAML value after start. A reload provisions a new Runtime and swaps it
// whole. The YAML types (Config and its sections) stay the contract with operators; Runtime is
// what the running process reads.
type Runtime struct {
	Server    ServerRuntime
	Admin     AdminRuntime
	Request   RequestRuntime
	Engine    EngineTimings
	Fleet     FleetRuntime
	Recovery  RecoveryRuntime
	Preflight PreflightRuntime
	// Contract is engine_contract; nil when the configuration pins none.
	Contract *EngineContract
	// Engines are the configured engines, in configuration order.
	Engines []EngineSpec
	Metrics MetricsRuntime
	Tracing TracingRuntime
	Log     LogRuntime
	Cluster ClusterRuntime
	// Discovery is the engine sources to run beside Engines (discovery.*, config/discovery.go).
	Discovery DiscoveryRuntime

	// Connectors is the KV connector registry the runtime was provisioned with: engines found
	// at run time (the admin API, discovery sources) are provisioned with it too.
	Connectors kv.Registry

	// reserved are the router's own listener ports: no producer's descriptor may name them,
	// whatever the engine's allowed ports say (kv.Side.ReservedPorts).
	reserved []int

	// file is the configuration this runtime was provisioned from: a reload compares the next
	// file with it key by key (Changes), and the file source reports its engines (FileEngines).
	file Config
}

// FileEngines is the configuration file's engine list, in the file's shape: what the file
// source reports (transport/discovery), so the file's engines join the fleet like any others.
func (rt Runtime) FileEngines() []Engine {
	out := make([]Engine, len(rt.file.Engines))
	for i, e := range rt.file.Engines {
		out[i] = e.clone()
	}
	return out
}

// ServerRuntime is the client listener's provisioned settings (server.*).
type ServerRuntime struct {
	Listen        string
	MaxBodyBytes  int
	HeaderTimeout time.Duration
	IdleTimeout   time.Duration
	ShutdownGrace time.Duration
	// DrainDelay is server.drain_delay_s: after SIGTERM, /readyz answers 503 and the listener
	// keeps accepting this long before it closes.
	DrainDelay           time.Duration
	ExposeRoutingHeaders bool
	MaxHeaderBytes       int
	ClientWriteTimeout   time.Duration
	MaxResponseBytes     int
	ExposeEngineErrors   bool
	// MaxBufferedBytes is the memory budget (server.max_buffered_bytes, or the value derived
	// from the memory limit); BufferBudgetSource says which.
	MaxBufferedBytes   int64
	BufferBudgetSource string
	// APIKeys are server.api_keys followed by the keys of server.api_keys_file, read once here;
	// none means no client authentication. APIKeyMaxConcurrency bounds one key's requests in
	// flight (0: unbounded).
	APIKeys              []string
	APIKeyMaxConcurrency int
	// Procs is server.procs: Fixed CPUs (0: the runtime's choice), or sized to the load (Auto).
	Procs Procs
}

// Procs is server.procs provisioned.
type Procs struct {
	Fixed int
	Auto  bool
}

// AdminRuntime is the admin listener's settings: server.admin_listen ("" turns it off),
// server.admin_token ("" leaves it open) and server.admin_idle_timeout_s.
type AdminRuntime struct {
	Listen      string
	Token       string
	IdleTimeout time.Duration
}

// FleetRuntime is disaggregation.* and placement.* provisioned.
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
}

// KVEventsRuntime is placement.kv_events provisioned.
type KVEventsRuntime struct {
	// Endpoint and Replay are the fleet's patterns ({host}: the engine URL's host); "" none.
	Endpoint, Replay string
	Topic            string
	MaxBlocks        int
	ReplayTimeout    time.Duration
	Reconnect        time.Duration
}

// Endpoints are where to follow spec's KV events: its own kv_events, else the fleet's
// patterns with its host; pub "" when none (or its endpoint is "off").
func (k KVEventsRuntime) Endpoints(spec EngineSpec) (pub, replay string) {
	pub, replay = spec.KVEvents.Endpoint, spec.KVEvents.ReplayEndpoint
	if pub == "" {
		pub = k.Endpoint
		if replay == "" {
			replay = k.Replay
		}
	}
	if pub == KVEventsOff {
		return "", ""
	}
	host := spec.KV.Host
	if strings.Contains(host, ":") {
		host = "[" + host + "]"
	}
	return strings.ReplaceAll(pub, kvEventsHost, host), strings.ReplaceAll(replay, kvEventsHost, host)
}

// EngineTimings are the engine-leg bounds (engine.*, and server.max_response_bytes, which bounds
// a passthrough answer as the engine client reads it).
type EngineTimings struct {
	Prefill    time.Duration
	FirstToken time.Duration
	// DecodeRead bounds silence between chunks after the first token; 0: the request
	// deadline alone bounds the stream.
	DecodeRead time.Duration
	Connect    time.Duration
	// Models bounds one GET /v1/models (engine.models_timeout_s).
	Models   time.Duration
	IdleConn time.Duration
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

// PreflightRuntime is preflight.*.
type PreflightRuntime struct {
	Concurrency int
	// RequireAll is preflight.require: all — `narwhal serve` runs the whole matrix before it
	// listens and exits on a failure.
	RequireAll bool
}

// EngineSpec is one configured engine, resolved: its URL parsed, its connector found in the
// registry, its KV side assembled.
type EngineSpec struct {
	Name string
	// Source names where the engine was found ("file" for the configuration's list, "admin",
	// or a discovery source's name). It is a label: two specs that differ only in it describe
	// the same engine.
	Source string
	// URL is the engine's base URL as configured; Base is its scheme://host[:port], Addr the
	// host:port to dial (the scheme's port when the URL names none), TLS whether it is https.
	URL  string
	Base string
	Addr string
	TLS  bool
	Role Role
	// MaxInflight caps the engine's phase reservations (0: no cap).
	MaxInflight int
	// Models are the models configured for the engine; none: it is asked (/v1/models).
	Models []string
	APIKey string
	// Connector is the engine's kv.connector, resolved; KV is its side of the transfer.
	Connector kv.Connector
	KV        kv.Side
	// KVEvents are the engine's own KV event endpoints (engines[].kv_events), as configured.
	KVEvents EngineKVEvents
}

// TracingRuntime is tracing.* provisioned. Enabled is false while tracing.otlp_endpoint is
// empty, and then nothing else is read.
type TracingRuntime struct {
	Enabled bool
	// Protocol is TracingGRPC or TracingHTTP.
	Protocol string
	// Endpoint is the collector's host:port; Insecure says plaintext (an http:// endpoint);
	// URLPath is the OTLP/HTTP path (/v1/traces unless the endpoint names one).
	Endpoint    string
	Insecure    bool
	URLPath     string
	SampleRatio float64
	ServiceName string
	Headers     map[string]string
}

// MetricsRuntime is metrics.*.
type MetricsRuntime struct {
	// Statsd is nil when no statsd daemon is configured.
	Statsd *StatsdRuntime
}

// StatsdRuntime is metrics.statsd.
type StatsdRuntime struct {
	Address       string
	Prefix        string
	FlushInterval time.Duration
}

// LogRuntime is log.*.
type LogRuntime struct {
	Level          slog.Level
	Format         string // json or text
	AccessLog      bool
	AccessLogFlush time.Duration
}

// ClusterRuntime is cluster.* with its derived names: Node and Advertise are resolved.
type ClusterRuntime struct {
	Enabled bool
	Name    string
	// Node labels this node (cluster.node_name, else the advertised address); Advertise is the
	// address peers reach it on (cluster.advertise, else cluster.bind).
	Node      string
	Bind      string
	Advertise string
	Provider  string
	Seeds     []string
	Etcd      EtcdRuntime

	GossipInterval    time.Duration
	HeartbeatInterval time.Duration
	SuspectAfter      time.Duration
	VerdictTTL        time.Duration
	RepublishInterval time.Duration
	// TLS are the cluster's credentials (cluster.tls); nil: none, allowed on loopback only.
	TLS *ClusterCredentials
}

// EtcdRuntime is cluster.etcd.
type EtcdRuntime struct {
	Endpoints   []string
	Prefix      string
	DialTimeout time.Duration
	// RequestTimeout bounds each etcd request of the membership (cluster.etcd.request_timeout_s);
	// LeaveTimeout bounds the deregistration when the node stops: RequestTimeout, but never past
	// server.shutdown_grace_s, so that a node with its etcd gone still exits within its grace.
	RequestTimeout time.Duration
	LeaveTimeout   time.Duration
}

// Provision validates c — every value, and every engine's connector name against connectors,
// the registry the router runs with — and reads it into its runtime form. It reports every
// problem at once, naming its line when c came from Parse or Load. It is the one way from a
// configuration to a running router: `serve --check` calls it too, so a file it passes starts.
func Provision(c Config, connectors kv.Registry) (Runtime, error) {
	if err := c.Validate(connectors); err != nil {
		return Runtime{}, err
	}
	keys, err := c.Server.ClientAPIKeys() // validated readable: this read is the one that counts
	if err != nil {
		return Runtime{}, err
	}
	fixed, auto, _ := c.Server.ProcsPolicy() // validated
	budget, budgetSource := c.Server.bufferBudget()
	rt := Runtime{
		Server: ServerRuntime{
			Listen:               c.Server.Listen,
			MaxBodyBytes:         c.Server.MaxBodyBytes,
			HeaderTimeout:        c.Server.HeaderTimeoutS.Duration(),
			IdleTimeout:          c.Server.IdleTimeoutS.Duration(),
			ShutdownGrace:        c.Server.ShutdownGraceS.Duration(),
			DrainDelay:           c.Server.DrainDelayS.Duration(),
			ExposeRoutingHeaders: c.Server.ExposeRoutingHeaders,
			MaxHeaderBytes:       c.Server.MaxHeaderBytes,
			ClientWriteTimeout:   c.Server.ClientWriteTimeoutS.Duration(),
			MaxResponseBytes:     c.Server.MaxResponseBytes,
			ExposeEngineErrors:   c.Server.ExposeEngineErrors,
			MaxBufferedBytes:     budget,
			BufferBudgetSource:   budgetSource,
			APIKeys:              keys,
			APIKeyMaxConcurrency: c.Server.APIKeyMaxConcurrency,
			Procs:                Procs{Fixed: fixed, Auto: auto},
		},
		Admin: AdminRuntime{Listen: c.Server.AdminListen, Token: c.Server.AdminToken,
			IdleTimeout: c.Server.AdminIdleTimeoutS.Duration()},
		Engine: c.Engine.provision(c.Server.MaxResponseBytes),
		Fleet: FleetRuntime{
			Disaggregation: c.Disaggregation.Policy, MinPromptTokens: c.Disaggregation.MinPromptTokens,
			PrefillSaturation: c.Disaggregation.PrefillSaturation, DecodeHeadroom: c.Disaggregation.DecodeHeadroom,
			MaxLocalPrompt: c.Disaggregation.MaxLocalPromptTokens, LocalStallBudget: c.Disaggregation.LocalStallBudgetS.Duration(),
			Placement: c.Placement.Policy, BlockWords: c.Placement.PrefixBlockWords,
			IndexBlocks: c.Placement.PrefixIndexBlocks, LoadFactor: c.Placement.LoadFactor,
			ScrapeInterval: c.Placement.ScrapeIntervalS.Duration(), ScrapeStale: c.Placement.ScrapeStaleS.Duration(),
			ScrapeTimeout: c.Placement.ScrapeTimeoutS.Duration(),
			KVEvents: KVEventsRuntime{Endpoint: c.Placement.KVEvents.Endpoint, Replay: c.Placement.KVEvents.ReplayEndpoint,
				Topic: c.Placement.KVEvents.Topic, MaxBlocks: c.Placement.KVEvents.MaxBlocks,
				ReplayTimeout: c.Placement.KVEvents.ReplayTimeoutS.Duration(), Reconnect: c.Placement.KVEvents.ReconnectS.Duration()},
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
		Recovery: RecoveryRuntime{
			RetryBudget: RetryBudgetRuntime{Ratio: c.Recovery.RetryBudget.Ratio, MinPerS: c.Recovery.RetryBudget.MinPerS,
				Window: c.Recovery.RetryBudget.WindowS.Duration()},
			EjectAfter:        c.Recovery.EjectAfter,
			FailureQuarantine: c.Recovery.FailureQuarantineS.Duration(),
			ProbeInterval:     c.Recovery.ProbeIntervalS.Duration(),
			ProbeMaxInterval:  c.Recovery.ProbeMaxIntervalS.Duration(),
			BlameWindow:       c.Recovery.BlameWindowS.Duration(),
			Backpressure: BackpressureRuntime{Bound: c.Recovery.Backpressure.BoundS.Duration(),
				Pass: c.Recovery.Backpressure.PassS.Duration(), MaxPass: c.Recovery.Backpressure.MaxPassS.Duration()},
			Readmission: c.Recovery.Readmission,
		},
		Preflight: PreflightRuntime{Concurrency: c.Preflight.Concurrency, RequireAll: c.Preflight.Require == RequireAll},
		Log: LogRuntime{Level: logLevel(c.Log.Level), Format: c.Log.Format, AccessLog: c.Log.AccessLog,
			AccessLogFlush: c.Log.AccessLogFlushS.Duration()},
		Cluster:    c.Cluster.provision(c.Server.ShutdownGraceS.Duration()),
		Discovery:  c.Discovery.provision(),
		Connectors: connectors,
		file:       c.clone(),
	}
	if ec := c.EngineContract; ec != nil {
		pinned := *ec
		rt.Contract = &pinned
	}
	rt.Tracing = c.Tracing.provision()
	if s := c.Metrics.Statsd; s != nil {
		rt.Metrics.Statsd = &StatsdRuntime{Address: s.Address, Prefix: s.Prefix, FlushInterval: s.FlushIntervalS.Duration()}
	}
	var errs []error
	reserved := c.reservedPorts()
	rt.reserved = reserved
	for _, e := range c.Engines {
		spec, err := ProvisionEngine(e, connectors)
		if err != nil {
			errs = append(errs, err)
			continue
		}
		spec.KV.ReservedPorts = reserved
		spec.Source = SourceFile
		rt.Engines = append(rt.Engines, spec)
	}
	if len(errs) > 0 { // unreachable after Validate; kept so that a gap between the two says so
		return Runtime{}, errors.Join(errs...)
	}
	return rt, nil
}

// SameEngine reports whether two specs describe the same engine: equal in everything but their
// Source (connectors compared by name). An engine whose spec changes otherwise is a new engine.
func SameEngine(a, b EngineSpec) bool {
	if (a.Connector == nil) != (b.Connector == nil) || (a.Connector != nil && a.Connector.Name() != b.Connector.Name()) {
		return false
	}
	a.Source, b.Source, a.Connector, b.Connector = "", "", nil, nil
	return reflect.DeepEqual(a, b)
}

// ProvisionEngine provisions an engine found while the router runs (the admin API, a discovery
// source) as Provision provisions the file's: with the runtime's connector registry, and kept
// off the router's own listener ports.
func (rt Runtime) ProvisionEngine(e Engine) (EngineSpec, error) {
	spec, err := ProvisionEngine(e, rt.Connectors)
	if err != nil {
		return EngineSpec{}, err
	}
	spec.KV.ReservedPorts = rt.reserved
	return spec, nil
}

// SourceFile is the Source of the configuration file's engines.
const SourceFile = "file"

// ProvisionEngine validates one engine as the configuration's engine list is validated (its
// name, URL, role, models and KV side; its connector, kv.connector or "" for the default,
// against connectors) and resolves it. Provision calls it for every configured engine; the
// engines found at run time (the admin API, discovery sources) are provisioned by it too, so
// each is held to the file's rules; a program that builds an engine client on its own (the
// transport package's Go API) may call it directly. The error names the engine and every
// problem.
func ProvisionEngine(e Engine, connectors kv.Registry) (EngineSpec, error) {
	ck := &checker{connectors: &connectors}
	ck.engine("", e)
	if len(ck.errs) > 0 {
		return EngineSpec{}, fmt.Errorf("engine %s: %w", e.Name, errors.Join(ck.errs...))
	}
	u, err := url.Parse(e.URL)
	if err != nil {
		return EngineSpec{}, fmt.Errorf("engine %s: %q is not an engine base URL; write http://host:port or https://host:port", e.Name, e.URL)
	}
	conn, err := connectors.For(e.KV.Connector)
	if err != nil {
		return EngineSpec{}, fmt.Errorf("engine %s: %w", e.Name, err)
	}
	addr := u.Host
	if u.Port() == "" {
		port := "80"
		if u.Scheme == "https" {
			port = "443"
		}
		addr = u.Hostname() + ":" + port
	}
	modes := e.KV.TransferModes
	if len(modes) == 0 {
		modes = []string{"pull"}
	}
	ports, err := parsePorts(e.KV.AllowedPorts)
	if err != nil {
		return EngineSpec{}, fmt.Errorf("engine %s: kv.allowed_ports%w", e.Name, err)
	}
	return EngineSpec{
		Name: e.Name, URL: e.URL, Base: u.Scheme + "://" + u.Host, Addr: addr, TLS: u.Scheme == "https",
		Role: e.Role, MaxInflight: e.MaxInflight, Models: append([]string(nil), e.Models...), APIKey: e.APIKey,
		Connector: conn,
		KV: kv.Side{
			Engine: e.Name, Connector: conn.Name(), EngineID: e.KV.EngineID, Endpoint: e.KV.Endpoint,
			TransferModes: modes, Host: u.Hostname(), AllowedEndpoints: e.KV.AllowedEndpoints, AllowedPorts: ports,
		},
		KVEvents: e.KVEvents,
	}, nil
}

// provision reads the engine timeouts into durations; maxResponse is server.max_response_bytes.
func (t EngineTimeouts) provision(maxResponse int) EngineTimings {
	return EngineTimings{
		Prefill:    t.PrefillTimeoutS.Duration(),
		FirstToken: t.FirstTokenTimeoutS.Duration(),
		DecodeRead: t.DecodeReadTimeoutS.Duration(),
		Connect:    t.ConnectTimeoutS.Duration(),
		Models:     t.ModelsTimeoutS.Duration(),
		IdleConn:   t.IdleConnTimeoutS.Duration(),

		Passthrough:      t.PassthroughTimeoutS.Duration(),
		MaxHeldBytes:     t.MaxHeldBytes,
		MaxHeldEvents:    t.MaxHeldEvents,
		MaxResponseBytes: maxResponse,
	}
}

func (c Cluster) provision(shutdownGrace time.Duration) ClusterRuntime {
	var creds *ClusterCredentials
	if c.TLS.set() {
		creds, _ = c.TLS.load() // validated
	}
	return ClusterRuntime{
		TLS:     creds,
		Enabled: c.Enabled, Name: c.Name, Node: c.node(), Bind: c.Bind, Advertise: c.advertiseAddr(),
		Provider: c.Provider, Seeds: append([]string(nil), c.Seeds...),
		Etcd: EtcdRuntime{Endpoints: append([]string(nil), c.Etcd.Endpoints...), Prefix: c.Etcd.Prefix,
			DialTimeout: c.Etcd.DialTimeoutS.Duration(), RequestTimeout: c.Etcd.RequestTimeoutS.Duration(),
			LeaveTimeout: min(c.Etcd.RequestTimeoutS.Duration(), shutdownGrace)},
		GossipInterval:    c.GossipIntervalS.Duration(),
		HeartbeatInterval: c.HeartbeatIntervalS.Duration(),
		SuspectAfter:      c.SuspectAfterS.Duration(),
		VerdictTTL:        c.VerdictTTLS.Duration(),
		RepublishInterval: c.RepublishIntervalS.Duration(),
	}
}

func logLevel(s string) slog.Level {
	switch s {
	case "debug":
		return slog.LevelDebug
	case "warn":
		return slog.LevelWarn
	case "error":
		return slog.LevelError
	}
	return slog.LevelInfo
}

// provision reads tracing.* (validated) into its runtime form.
func (t Tracing) provision() TracingRuntime {
	if t.OTLPEndpoint == "" {
		return TracingRuntime{}
	}
	u, _ := url.Parse(t.OTLPEndpoint) // validated
	rt := TracingRuntime{Enabled: true, Protocol: t.Protocol, Endpoint: u.Host, Insecure: u.Scheme == "http",
		SampleRatio: t.SampleRatio, ServiceName: t.ServiceName, Headers: map[string]string{}}
	if t.Protocol == TracingHTTP {
		rt.URLPath = "/v1/traces"
		if u.Path != "" && u.Path != "/" {
			rt.URLPath = u.Path
		}
	}
	for _, h := range t.Headers {
		rt.Headers[h.Name] = h.Value
	}
	return rt
}
