// Package telemetry owns what Narwhal reports about itself: the tally root scope and its
// reporters (statsd with tags flattened into names, Prometheus on the admin listener), and the
// catalog of metrics, each recorded through a method named for the event it counts.
package telemetry

import (
	"strconv"
	"sync"
	"time"

	"github.com/uber-go/tally/v4"
)

// Metrics records Narwhal's metrics into a tally scope. Instruments are created once per tag
// combination and cached, so recording on the hot path is a map lookup and an atomic add.
type Metrics struct {
	scope tally.Scope

	mu       sync.RWMutex
	counters map[instrumentKey]tally.Counter
	timers   map[instrumentKey]tally.Timer
	gauges   map[instrumentKey]tally.Gauge

	tokenGap tally.Histogram
	// engines forgets and remembers one engine's series (nil: nothing to forget).
	engines interface {
		forget(engine string)
		remember(engine string)
	}
}

// ForgetEngine drops the series of an engine that left the fleet (every counter and gauge
// tagged with its name as engine or producer): Prometheus no longer exports them, and statsd is
// sent nothing more for them, until RememberEngine.
func (m *Metrics) ForgetEngine(engine string) {
	if m.engines != nil {
		m.engines.forget(engine)
	}
}

// RememberEngine undoes ForgetEngine for an engine (re)joining the fleet under that name.
func (m *Metrics) RememberEngine(engine string) {
	if m.engines != nil {
		m.engines.remember(engine)
	}
}

// New records into scope (tally.NoopScope for none).
func New(scope tally.Scope) *Metrics {
	return &Metrics{
		scope:    scope,
		counters: map[instrumentKey]tally.Counter{},
		timers:   map[instrumentKey]tally.Timer{},
		gauges:   map[instrumentKey]tally.Gauge{},
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

// instrumentKey identifies one instrument: a name and up to three tag key/value pairs. It is a
// comparable value, so looking an instrument up allocates nothing.
type instrumentKey struct {
	name string
	kv   [6]string
}

func key(name string, kv ...string) instrumentKey {
	k := instrumentKey{name: name}
	if len(kv) > len(k.kv) {
		panic("telemetry: " + name + " has more than three tags")
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

// counter returns the counter name{kv...}; kv alternates tag keys and values, and one metric
// name always uses the same keys (Prometheus requires it).
func (m *Metrics) counter(name string, kv ...string) tally.Counter {
	k := key(name, kv...)
	m.mu.RLock()
	c, ok := m.counters[k]
	m.mu.RUnlock()
	if ok {
		return c
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	if c, ok = m.counters[k]; !ok {
		c = m.scope.Tagged(tags(kv)).Counter(name)
		m.counters[k] = c
	}
	return c
}

// timer returns a latency timer: statsd gets every sample (it computes percentiles), Prometheus
// a histogram in seconds.
func (m *Metrics) timer(name string, kv ...string) tally.Timer {
	k := key(name, kv...)
	m.mu.RLock()
	h, ok := m.timers[k]
	m.mu.RUnlock()
	if ok {
		return h
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	if h, ok = m.timers[k]; !ok {
		h = m.scope.Tagged(tags(kv)).Timer(name)
		m.timers[k] = h
	}
	return h
}

func (m *Metrics) gauge(name string, kv ...string) tally.Gauge {
	k := key(name, kv...)
	m.mu.RLock()
	g, ok := m.gauges[k]
	m.mu.RUnlock()
	if ok {
		return g
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	if g, ok = m.gauges[k]; !ok {
		g = m.scope.Tagged(tags(kv)).Gauge(name)
		m.gauges[k] = g
	}
	return g
}

// Rejected counts a request refused before it reached a supervisor (bad input).
func (m *Metrics) Rejected(endpoint string, status int, d time.Duration) {
	m.counter("requests", "endpoint", endpoint, "status", strconv.Itoa(status), "outcome", "rejected").Inc(1)
	m.timer("total_s", "endpoint", endpoint, "outcome", "rejected").Record(d)
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
	Endpoint   string
	Status     int
	Outcome    string
	Attempts   int
	TTFT       time.Duration // zero: no prefill completed
	FirstByte  time.Duration // zero: no token arrived
	Total      time.Duration
	OutputToks int
}

// RequestDone records a request's single outcome and its measurement contract.
func (m *Metrics) RequestDone(r Request) {
	m.counter("requests", "endpoint", r.Endpoint, "status", strconv.Itoa(r.Status), "outcome", r.Outcome).Inc(1)
	m.timer("total_s", "endpoint", r.Endpoint, "outcome", r.Outcome).Record(r.Total)
	if r.TTFT > 0 {
		m.timer("ttft_s", "endpoint", r.Endpoint).Record(r.TTFT)
	}
	if r.FirstByte > 0 {
		m.timer("first_byte_s", "endpoint", r.Endpoint).Record(r.FirstByte)
	}
	if r.Attempts > 0 {
		m.counter("attempts", "endpoint", r.Endpoint).Inc(int64(r.Attempts))
	}
	if r.OutputToks > 0 {
		m.counter("output_tokens", "endpoint", r.Endpoint).Inc(int64(r.OutputToks))
	}
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

// RuntimeProcs records how many CPUs the Go scheduler runs the router on (server.procs).
func (m *Metrics) RuntimeProcs(n int) { m.gauge("runtime_procs").Update(float64(n)) }

// EngineInflight reports an engine's reservations per phase.
func (m *Metrics) EngineInflight(engine string, prefill, decode int) {
	m.gauge("engine_inflight", "engine", engine, "phase", "prefill").Update(float64(prefill))
	m.gauge("engine_inflight", "engine", engine, "phase", "decode").Update(float64(decode))
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

// EngineLoad reports an engine's scraped load.
func (m *Metrics) EngineLoad(engine string, running, waiting int, kvUsage float64) {
	m.gauge("engine_scraped_running", "engine", engine).Update(float64(running))
	m.gauge("engine_scraped_waiting", "engine", engine).Update(float64(waiting))
	m.gauge("engine_scraped_kv_usage", "engine", engine).Update(kvUsage)
}
