// Package telemetry owns what Narwhal reports about itself: the tally root scope and its
// reporters (statsd with tags flattened into names, Prometheus on the admin listener), and the
// catalog of metrics, each recorded through a method named for the event it counts.
package telemetry

import (
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/uber-go/tally/v4"

	"github.com/narwhal-router/narwhal/buildinfo"
)

// Metrics records Narwhal's metrics into a tally scope. Instruments are created once per tag
// combination and cached, so recording on the hot path is a map lookup and an atomic add.
type Metrics struct {
	scope tally.Scope

	mu       sync.RWMutex
	counters map[instrumentKey]tally.Counter
	timers   map[instrumentKey]tally.Timer
	gauges   map[instrumentKey]tally.Gauge
	sets     map[setKey]*requestSet

	tokenGap tally.Histogram
	// errorHists are CachedTokensError's histograms, by kind and direction.
	errorHists sync.Map

	// models is the model label's values (ServeModels); modelsMu serializes its writers.
	models   atomic.Pointer[map[string]string]
	modelsMu sync.Mutex
	// engines forgets and remembers one engine's series (nil: nothing to forget).
	engines interface {
		forget(engine string)
		remember(engine string)
	}
	// direct makes an engine's counters and gauges outside tally (nil: in tally scopes), so
	// that none of tally's per-tag-set state is made for a name that will go (fanout).
	direct interface {
		engineCounter(engine, name string, tags map[string]string) tally.Counter
		engineGauge(engine, name string, tags map[string]string) tally.Gauge
	}
	// byEngine is, per engine name, the instruments tagged with it (as engine or producer), kept
	// apart from the others so that ForgetEngine drops them whole (under mu).
	byEngine map[string]*engineSet
}

// New records into scope (tally.NoopScope for none).
func New(scope tally.Scope) *Metrics {
	return &Metrics{
		scope:    scope,
		counters: map[instrumentKey]tally.Counter{},
		timers:   map[instrumentKey]tally.Timer{},
		gauges:   map[instrumentKey]tally.Gauge{},
		sets:     map[setKey]*requestSet{},
		byEngine: map[string]*engineSet{},
		tokenGap: scope.Histogram("inter_token_gap_s", gapBuckets),
	}
}

// Noop is a Metrics that records nothing.
func Noop() *Metrics { return New(tally.NoopScope) }

// Scope is the root scope, for metrics defined elsewhere.
func (m *Metrics) Scope() tally.Scope { return m.scope }

var (
	gapBuckets = tally.DurationBuckets{time.Millisecond, 2 * time.Millisecond, 5 * time.Millisecond, 10 * time.Millisecond, 20 * time.Millisecond, 50 * time.Millisecond, 100 * time.Millisecond, 250 * time.Millisecond, 500 * time.Millisecond, time.Second, 5 * time.Second}
)

// instrumentKey identifies one instrument: a name and up to four tag key/value pairs. It is a
// comparable value, so looking an instrument up allocates nothing.
type instrumentKey struct {
	name string
	kv   [8]string
}

func key(name string, kv ...string) instrumentKey {
	k := instrumentKey{name: name}
	if len(kv) > len(k.kv) {
		panic("telemetry: " + name + " has more than four tags")
	}
	copy(k.kv[:], kv)
	return k
}

func tags(kv []string) map[string]string {
	t := make(map[string]string, len(kv)/2)
	for i := 0; i+1 < len(kv); i += 2 {
		t[kv[i]] = kv[i+1]
	}
	return t
}

// cached returns the instrument m[k], made by mk and kept on first use. Reads take mu's read
// lock only, so recording an already-made instrument is a map lookup.
func cached[K comparable, V any](mu *sync.RWMutex, m map[K]V, k K, mk func() V) V {
	mu.RLock()
	v, ok := m[k]
	mu.RUnlock()
	if ok {
		return v
	}
	mu.Lock()
	defer mu.Unlock()
	if v, ok = m[k]; !ok {
		v = mk()
		m[k] = v
	}
	return v
}

// counter returns the counter name{kv...}; kv alternates tag keys and values, and one metric
// name always uses the same keys (Prometheus requires it).
func (m *Metrics) counter(name string, kv ...string) tally.Counter {
	if engine := engineOf(kv); engine != "" {
		return engineCached(m, engine, func(e *engineSet) map[instrumentKey]tally.Counter { return e.counters }, key(name, kv...),
			func() (tally.Counter, tally.Scope) {
				if m.direct != nil {
					return m.direct.engineCounter(engine, name, tags(kv)), nil
				}
				s := m.scope.Tagged(tags(kv))
				return s.Counter(name), s
			})
	}
	return cached(&m.mu, m.counters, key(name, kv...), func() tally.Counter { return m.scope.Tagged(tags(kv)).Counter(name) })
}

// timer returns a latency timer: statsd gets every sample (it computes percentiles), Prometheus
// a histogram in seconds.
func (m *Metrics) timer(name string, kv ...string) tally.Timer {
	if engine := engineOf(kv); engine != "" {
		return engineCached(m, engine, func(e *engineSet) map[instrumentKey]tally.Timer { return e.timers }, key(name, kv...),
			func() (tally.Timer, tally.Scope) {
				s := m.scope.Tagged(tags(kv))
				return s.Timer(name), s
			})
	}
	return cached(&m.mu, m.timers, key(name, kv...), func() tally.Timer { return m.scope.Tagged(tags(kv)).Timer(name) })
}

func (m *Metrics) gauge(name string, kv ...string) tally.Gauge {
	if engine := engineOf(kv); engine != "" {
		return engineCached(m, engine, func(e *engineSet) map[instrumentKey]tally.Gauge { return e.gauges }, key(name, kv...),
			func() (tally.Gauge, tally.Scope) {
				if m.direct != nil {
					return m.direct.engineGauge(engine, name, tags(kv)), nil
				}
				s := m.scope.Tagged(tags(kv))
				return s.Gauge(name), s
			})
	}
	return cached(&m.mu, m.gauges, key(name, kv...), func() tally.Gauge { return m.scope.Tagged(tags(kv)).Gauge(name) })
}

// The model label of the request metrics is bounded: each model the fleet serves (ServeModels)
// is a value of its own, up to MaxModelLabels of them; anything else — a model the fleet does
// not serve, a request that named none, models past the bound — is counted as OtherModel. A
// client cannot grow the number of series by inventing model names.
const (
	MaxModelLabels = 32
	OtherModel     = "other"
)

// ServeModels adds models to the values the model label may take (the router calls it with
// the fleet's models at start and whenever an engine lists its models). Values are never
// removed, so a series does not vanish while Prometheus still scrapes it.
func (m *Metrics) ServeModels(models []string) {
	m.modelsMu.Lock()
	defer m.modelsMu.Unlock()
	cur := m.models.Load()
	next := map[string]string{}
	if cur != nil {
		for k, v := range *cur {
			next[k] = v
		}
	}
	for _, name := range models {
		if _, ok := next[name]; !ok && len(next) < MaxModelLabels && name != "" {
			next[name] = name
		}
	}
	m.models.Store(&next)
}

// modelLabel is the model label's value for a request that named model.
func (m *Metrics) modelLabel(model string) string {
	if p := m.models.Load(); p != nil {
		if v, ok := (*p)[model]; ok {
			return v
		}
	}
	return OtherModel
}

// Rejected counts a request refused before it reached a supervisor (bad input): its model is
// not known (OtherModel).
func (m *Metrics) Rejected(endpoint string, status int, d time.Duration) {
	m.counter("requests", "endpoint", endpoint, "model", OtherModel, "status", strconv.Itoa(status), "outcome", "rejected").Inc(1)
	m.timer("total_s", "endpoint", endpoint, "model", OtherModel, "outcome", "rejected").Record(d)
}

// TokenGap records the time between two relayed token events.
func (m *Metrics) TokenGap(d time.Duration) { m.tokenGap.RecordDuration(d) }

// TokensRelayed counts token events relayed to streaming clients.
func (m *Metrics) TokensRelayed(endpoint string, n int) {
	if n > 0 {
		m.counter("relayed_tokens", "endpoint", endpoint).Inc(int64(n))
	}
}

// Request is everything recorded about one finished request.
type Request struct {
	Endpoint string
	// Model is the model the request named; its label is bounded (ServeModels).
	Model     string
	Status    int
	Outcome   string
	Attempts  int
	TTFT      time.Duration // zero: no prefill completed
	FirstByte time.Duration // zero: no token arrived
	Total     time.Duration
	// Token counts from the engine's usage, as the client was told them (cached after the
	// router's correction, see transport/wire/usage.go); zero when unknown.
	OutputToks, PromptToks, CachedToks int
}

// RequestDone records a request's single outcome and its measurement contract.
func (m *Metrics) RequestDone(r Request) {
	set := m.requestSet(r.Endpoint, m.modelLabel(r.Model))
	o := set.outcome(m, r.Status, r.Outcome)
	o.requests.Inc(1)
	o.total.Record(r.Total)
	if r.TTFT > 0 {
		set.ttft.Record(r.TTFT)
	}
	if r.FirstByte > 0 {
		set.firstByte.Record(r.FirstByte)
	}
	if r.Attempts > 0 {
		set.attempts.Inc(int64(r.Attempts))
	}
	if r.OutputToks > 0 {
		set.output.Inc(int64(r.OutputToks))
	}
	if r.PromptToks > 0 {
		set.prompt.Inc(int64(r.PromptToks))
	}
	if r.CachedToks > 0 {
		set.cached.Inc(int64(r.CachedToks))
	}
}

// requestSet is the request metrics' instruments for one endpoint and model label, made once,
// so that recording a request is two lookups (the set, then its status and outcome) rather than
// one per metric.
type requestSet struct {
	endpoint, model                  string
	ttft, firstByte                  tally.Timer
	attempts, output, prompt, cached tally.Counter

	mu        sync.RWMutex
	byOutcome map[outcomeKey]outcomeInstruments
}

type (
	setKey     struct{ endpoint, model string }
	outcomeKey struct {
		status  int
		outcome string
	}
	outcomeInstruments struct {
		requests tally.Counter
		total    tally.Timer
	}
)

func (m *Metrics) requestSet(endpoint, model string) *requestSet {
	// Made outside m.mu: its instruments take that lock themselves.
	k := setKey{endpoint, model}
	m.mu.RLock()
	set, ok := m.sets[k]
	m.mu.RUnlock()
	if ok {
		return set
	}
	set = &requestSet{endpoint: endpoint, model: model, byOutcome: map[outcomeKey]outcomeInstruments{},
		ttft:      m.timer("ttft_s", "endpoint", endpoint, "model", model),
		firstByte: m.timer("first_byte_s", "endpoint", endpoint, "model", model),
		attempts:  m.counter("attempts", "endpoint", endpoint, "model", model),
		output:    m.counter("output_tokens", "endpoint", endpoint, "model", model),
		prompt:    m.counter("prompt_tokens", "endpoint", endpoint, "model", model),
		cached:    m.counter("cached_prompt_tokens", "endpoint", endpoint, "model", model),
	}
	return cached(&m.mu, m.sets, k, func() *requestSet { return set })
}

func (s *requestSet) outcome(m *Metrics, status int, outcome string) outcomeInstruments {
	return cached(&s.mu, s.byOutcome, outcomeKey{status, outcome}, func() outcomeInstruments {
		// Made under s.mu: m.counter and m.timer take m.mu, and nothing takes s.mu under m.mu.
		return outcomeInstruments{
			requests: m.counter("requests", "endpoint", s.endpoint, "model", s.model, "status", strconv.Itoa(status), "outcome", outcome),
			total:    m.timer("total_s", "endpoint", s.endpoint, "model", s.model, "outcome", outcome),
		}
	})
}

// HandoffAge records the age of a handoff when its decode leg starts.
func (m *Metrics) HandoffAge(endpoint string, d time.Duration) {
	m.timer("handoff_age_s", "endpoint", endpoint).Record(d)
}

// EngineFault counts a failed engine leg by engine, leg and fault kind; descriptor rejections
// are also counted by reason.
func (m *Metrics) EngineFault(engine, leg, kind, reason string) {
	m.counter("engine_faults", "engine", engine, "leg", leg, "kind", kind).Inc(1)
	if reason != "" {
		m.counter("descriptor_rejections", "producer", engine, "reason", reason).Inc(1)
	}
}

// Retry counts a fresh attempt started after a fault of kind.
func (m *Metrics) Retry(kind string) { m.counter("retries", "reason", kind).Inc(1) }

// RetryBudgetExhausted counts a retry the budget refused.
func (m *Metrics) RetryBudgetExhausted() { m.counter("retry_budget_exhausted").Inc(1) }

// MissingDescriptor counts a prefill that returned no descriptor, by the action taken.
func (m *Metrics) MissingDescriptor(producer, action string) {
	m.counter("missing_descriptor", "producer", producer, "action", action).Inc(1)
}

// AdmissionRejected counts a request refused for lack of an engine or capacity.
func (m *Metrics) AdmissionRejected(reason string) {
	m.counter("admission_rejections", "reason", reason).Inc(1)
}

// ClientDisconnect counts a client that hung up, by the request phase it was in.
func (m *Metrics) ClientDisconnect(phase string) {
	m.counter("client_disconnects", "phase", phase).Inc(1)
}

// QueueDepth reports how many requests wait for capacity.
func (m *Metrics) QueueDepth(n int) { m.gauge("queue_depth").Update(float64(n)) }

// BuildInfo reports the running build's identity as build_info{version,revision,goversion} = 1
// (the Prometheus convention: join on it to label any series with the version).
func (m *Metrics) BuildInfo(b buildinfo.Info) {
	m.gauge("build_info", "version", b.Version, "revision", b.Revision, "goversion", b.GoVersion).Update(1)
}

// RuntimeProcs records how many CPUs the Go scheduler runs the router on (server.procs).
func (m *Metrics) RuntimeProcs(n int) { m.gauge("runtime_procs").Update(float64(n)) }

// EngineInflight reports an engine's reservations per phase.
func (m *Metrics) EngineInflight(engine string, prefill, decode int) {
	m.gauge("engine_inflight", "engine", engine, "phase", "prefill").Update(float64(prefill))
	m.gauge("engine_inflight", "engine", engine, "phase", "decode").Update(float64(decode))
}

// EngineState reports where an engine stands with the router: engine_state{engine,state} is 1
// for its current state and 0 for every other of states, so a graph of the series that are 1
// shows each engine's state over time and a sum by state counts the engines in each.
func (m *Metrics) EngineState(engine, current string, states []string) {
	for _, st := range states {
		v := 0.0
		if st == current {
			v = 1
		}
		m.gauge("engine_state", "engine", engine, "state", st).Update(v)
	}
}

// BreakerTransition counts an engine's breaker moving between states.
func (m *Metrics) BreakerTransition(engine, from, to string) {
	m.counter("breaker_transitions", "engine", engine, "from", from, "to", to).Inc(1)
}

// ClusterVerdict counts breaker verdicts shared with other Narwhal nodes: "published" (decided
// here), "applied" (a peer's, changing this node's view) or "stale" (a peer's, older than what
// this node knew).
func (m *Metrics) ClusterVerdict(engine, state, direction string) {
	m.counter("cluster_verdicts", "engine", engine, "state", state, "direction", direction).Inc(1)
}

// ProbeResult counts a readmission probe's outcome.
func (m *Metrics) ProbeResult(engine, result string) {
	m.counter("probe_results", "engine", engine, "result", result).Inc(1)
}

// JoinCheck counts the check a new engine passes before it takes traffic: "success" (it is
// admitted), "failure" (it starts ejected, and is probed), "inconclusive" (no partner could
// complete it yet).
func (m *Metrics) JoinCheck(engine, result string) {
	m.counter("engine_join_checks", "engine", engine, "result", result).Inc(1)
}

// FleetEngines reports how many engines the fleet has in each lifecycle state.
func (m *Metrics) FleetEngines(state string, n int) {
	m.gauge("fleet_engines", "state", state).Update(float64(n))
}

// DiscoverySource reports a discovery source's state: up (its last report was a set, not an
// error), the engines it contributes, and how many it reported that were skipped.
func (m *Metrics) DiscoverySource(source string, up bool, engines, skipped int) {
	v := 0.0
	if up {
		v = 1
	}
	m.gauge("discovery_source_up", "source", source).Update(v)
	m.gauge("discovery_source_engines", "source", source).Update(float64(engines))
	m.gauge("discovery_source_skipped", "source", source).Update(float64(skipped))
}

// DiscoverySourceError counts a source's failed refresh.
func (m *Metrics) DiscoverySourceError(source string) {
	m.counter("discovery_source_errors", "source", source).Inc(1)
}

// ConfigReload counts a reload of the configuration file by result ("applied", "refused": a
// setting that cannot change at run time changed, "invalid": the file does not parse or
// validate), and sets config_reload_ok to whether it applied.
func (m *Metrics) ConfigReload(result string) {
	m.counter("config_reloads", "result", result).Inc(1)
	ok := 0.0
	if result == "applied" {
		ok = 1
	}
	m.gauge("config_reload_ok").Update(ok)
}

// RequestAttributedFailure counts a failed engine leg blamed on its request rather than on
// the engine (the request failed the same way on another engine): it extended no streak.
func (m *Metrics) RequestAttributedFailure(leg, kind string) {
	m.counter("request_attributed_failures", "leg", leg, "kind", kind).Inc(1)
}

// WaveRestart counts a whole-wave restart of a role's engine actors.
func (m *Metrics) WaveRestart(role string) { m.counter("wave_restarts", "role", role).Inc(1) }

// DisaggregationDecision counts a request's choice between prefill/decode ("disaggregated")
// and same-worker decode ("local"), with the rule that made it (docs/configuration.md): once
// per request, when its first attempt is placed.
func (m *Metrics) DisaggregationDecision(decision, reason string) {
	m.counter("disaggregation_decisions", "decision", decision, "reason", reason).Inc(1)
}

// DisaggregationRetryDecision counts a retry's decision, labelled as DisaggregationDecision.
func (m *Metrics) DisaggregationRetryDecision(decision, reason string) {
	m.counter("disaggregation_retry_decisions", "decision", decision, "reason", reason).Inc(1)
}

// PrefixPlacement counts a leg placed with prefix preference, by what happened: "hit" (the
// engine with the longest match), "bounded" (a match existed but its engines were over the
// load bound), "miss" (no engine matched).
func (m *Metrics) PrefixPlacement(phase, result string) {
	m.counter("prefix_placements", "phase", phase, "result", result).Inc(1)
}

// EngineScrape counts one /metrics scrape of an engine by result ("ok", "error").
func (m *Metrics) EngineScrape(engine, result string) {
	m.counter("engine_scrapes", "engine", engine, "result", result).Inc(1)
}

// KVEvents counts what an engine's KV cache event stream did: "batch" (a batch applied to the
// exact prefix index), "gap" (batches lost for good: the engine's entries are dropped), "restart"
// (the publisher started over), "error" (the stream broke and is followed again), "hostile" (the
// publisher sent what no vLLM sends — a frame, message or count over kvevents' bounds — and was
// hung up on; it is followed again after the backoff).
func (m *Metrics) KVEvents(engine, result string) {
	m.counter("kv_events", "engine", engine, "result", result).Inc(1)
}

// KVIndexBlocks reports the block hashes the exact prefix index holds for an engine, from its
// KV cache events.
func (m *Metrics) KVIndexBlocks(engine string, blocks int) {
	m.gauge("kv_index_blocks", "engine", engine).Update(float64(blocks))
}

// EngineLoad reports an engine's scraped load.
func (m *Metrics) EngineLoad(engine string, running, waiting int, kvUsage float64) {
	m.gauge("engine_scraped_running", "engine", engine).Update(float64(running))
	m.gauge("engine_scraped_waiting", "engine", engine).Update(float64(waiting))
	m.gauge("engine_scraped_kv_usage", "engine", engine).Update(kvUsage)
}

// BufferedBytes is what the memory budget (server.max_buffered_bytes) holds: client bodies and
// whole answers.
func (m *Metrics) BufferedBytes(n int64) { m.gauge("buffered_bytes").Update(float64(n)) }

// BufferRefused counts requests the memory budget refused: reason budget (503 before the body
// was read), too_large (413: the body alone exceeds the budget) or answer (503: an answer that
// did not fit).
func (m *Metrics) BufferRefused(reason string) {
	m.counter("buffer_refusals", "reason", reason).Inc(1)
}
