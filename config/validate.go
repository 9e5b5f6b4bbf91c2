package config

import (
	"errors"
	"fmt"
	"math"
	"net"
	"net/netip"
	"net/url"
	"regexp"
	"strconv"
	"strings"

	"github.com/narwhal-router/narwhal/transport/kv"
)

// Validate checks every value, and every engine's kv.connector against connectors (the registry
// the router runs with), and reports all problems at once, each naming its line when c came
// from Parse or Load. Provision runs it; call it directly to check a configuration built in Go.
func (c *Config) Validate(connectors kv.Registry) error {
	ck := &checker{lines: c.lines, connectors: &connectors}
	c.check(ck)
	return errors.Join(ck.errs...)
}

type checker struct {
	lines map[string]int
	skip  map[string]bool // paths already reported by the parser
	// failed are the paths reported so far, so that a general check (checkFinite) does not
	// report again a value a key's own check refused.
	failed map[string]bool
	// connectors is the registry engines' connector names are checked against; nil while
	// parsing, which cannot know the registry the file will run with (Provision checks them).
	connectors *kv.Registry
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

var engineName = regexp.MustCompile(`^[A-Za-z0-9][A-Za-z0-9_.-]{0,63}$`)

// check records every problem of c in ck.
func (c *Config) check(ck *checker) {

	ck.hostPort("server.listen", c.Server.Listen, true)
	if c.Server.AdminListen != "" {
		ck.hostPort("server.admin_listen", c.Server.AdminListen, true)
	}
	if c.Server.MaxBodyBytes <= 0 {
		ck.fail("server.max_body_bytes", "must be a byte count greater than 0, got %d", c.Server.MaxBodyBytes)
	}
	ck.nonNegative("server.shutdown_grace_s", c.Server.ShutdownGraceS)
	if f := float64(c.Server.DrainDelayS); !finite(f) || f < 0 || f > maxDrainDelay {
		ck.fail("server.drain_delay_s", "%v is not allowed; want a number of seconds from 0 (close the listener at once) to %d", f, maxDrainDelay)
	}
	ck.positive("server.header_timeout_s", c.Server.HeaderTimeoutS)
	ck.positive("server.idle_timeout_s", c.Server.IdleTimeoutS)
	ck.positive("server.admin_idle_timeout_s", c.Server.AdminIdleTimeoutS)
	ck.checkAPIKeys(c.Server)
	ck.checkSecrets(c)
	if v := c.Server.MaxHeaderBytes; v < 4096 || v > 1<<20 {
		ck.fail("server.max_header_bytes", "%d is not allowed; want a byte count from 4096 to 1048576", v)
	}
	ck.positive("server.client_write_timeout_s", c.Server.ClientWriteTimeoutS)
	if v := c.Server.MaxResponseBytes; v < 1 || v > 1<<30 {
		ck.fail("server.max_response_bytes", "%d is not allowed; want a byte count from 1 to 1073741824", v)
	}
	ck.checkBudget(c.Server)
	if _, _, err := c.Server.ProcsPolicy(); err != nil {
		ck.fail("server.procs", "%v", err)
	}

	ck.positive("request.deadline_s", c.Request.DeadlineS)

	if c.Admission.MaxQueue < 0 {
		ck.fail("admission.max_queue", "must be 0 (no waiting) or more, got %d", c.Admission.MaxQueue)
	}
	ck.nonNegative("admission.queue_timeout_s", c.Admission.QueueTimeoutS)

	ck.positive("engine.prefill_timeout_s", c.Engine.PrefillTimeoutS)
	ck.positive("engine.first_token_timeout_s", c.Engine.FirstTokenTimeoutS)
	ck.nonNegative("engine.decode_read_timeout_s", c.Engine.DecodeReadTimeoutS)
	ck.positive("engine.connect_timeout_s", c.Engine.ConnectTimeoutS)
	ck.positive("engine.models_timeout_s", c.Engine.ModelsTimeoutS)
	ck.positive("engine.idle_conn_timeout_s", c.Engine.IdleConnTimeoutS)
	ck.positive("engine.passthrough_timeout_s", c.Engine.PassthroughTimeoutS)
	if v := c.Engine.MaxHeldBytes; v < 1 || v > 1<<30 {
		ck.fail("engine.max_held_bytes", "%d is not allowed; want a byte count from 1 to 1073741824", v)
	}
	if v := c.Engine.MaxHeldEvents; v < 1 || v > 1<<20 {
		ck.fail("engine.max_held_events", "%d is not allowed; want an event count from 1 to 1048576", v)
	}

	ck.positive("handoff.max_age_s", c.Handoff.MaxAgeS)
	ck.oneOf("handoff.on_missing", c.Handoff.OnMissing, OnMissingRecompute, OnMissingFail)

	c.checkPlacement(ck)

	r := c.Recovery
	if r.MaxAttempts < 1 || r.MaxAttempts > 10 {
		ck.fail("recovery.max_attempts", "must be between 1 (no retries) and 10, got %d", r.MaxAttempts)
	}
	if !finite(r.RetryBudget.Ratio) || r.RetryBudget.Ratio < 0 || r.RetryBudget.Ratio > 1 {
		ck.fail("recovery.retry_budget.ratio", "must be a fraction between 0 and 1, got %v", r.RetryBudget.Ratio)
	}
	if !finite(r.RetryBudget.MinPerS) || r.RetryBudget.MinPerS < 0 || r.RetryBudget.MinPerS > 1e6 {
		ck.fail("recovery.retry_budget.min_per_s", "must be from 0 to 1000000 retries per second, got %v", r.RetryBudget.MinPerS)
	}
	ck.positive("recovery.retry_budget.window_s", r.RetryBudget.WindowS)
	if r.EjectAfter < 1 {
		ck.fail("recovery.eject_after", "must be 1 or more consecutive stream failures, got %d", r.EjectAfter)
	}
	ck.nonNegative("recovery.failure_quarantine_s", r.FailureQuarantineS)
	ck.positive("recovery.probe_interval_s", r.ProbeIntervalS)
	if r.ProbeMaxIntervalS < r.ProbeIntervalS {
		ck.fail("recovery.probe_max_interval_s", "must be at least recovery.probe_interval_s (%v), got %v",
			float64(r.ProbeIntervalS), float64(r.ProbeMaxIntervalS))
	}
	ck.oneOf("recovery.readmission", r.Readmission, ReadmissionProbe, ReadmissionHealth)
	ck.positive("recovery.blame_window_s", r.BlameWindowS)
	ck.nonNegative("recovery.backpressure.bound_s", r.Backpressure.BoundS)
	ck.positive("recovery.backpressure.pass_s", r.Backpressure.PassS)
	if r.Backpressure.MaxPassS < r.Backpressure.PassS {
		ck.fail("recovery.backpressure.max_pass_s", "must be at least recovery.backpressure.pass_s (%v), got %v",
			float64(r.Backpressure.PassS), float64(r.Backpressure.MaxPassS))
	}

	if ec := c.EngineContract; ec != nil {
		if ec.Model == "" && ec.Version == "" && ec.Connector == "" && ec.MaxModelLen == 0 {
			ck.fail("engine_contract", "pins nothing; set at least one of model, max_model_len, version, connector")
		}
		if ec.MaxModelLen < 0 {
			ck.fail("engine_contract.max_model_len", "must be a token count, got %d", ec.MaxModelLen)
		}
	}
	if c.Preflight.Concurrency < 1 {
		ck.fail("preflight.concurrency", "must be 1 or more, got %d", c.Preflight.Concurrency)
	}
	ck.oneOf("preflight.require", c.Preflight.Require, RequireNone, RequireAll)

	c.validateEngines(ck)

	if s := c.Metrics.Statsd; s != nil {
		ck.hostPort("metrics.statsd.address", s.Address, false)
		ck.positive("metrics.statsd.flush_interval_s", s.FlushIntervalS)
	}
	ck.tracing(c.Tracing)
	ck.oneOf("log.level", c.Log.Level, "debug", "info", "warn", "error")
	ck.oneOf("log.format", c.Log.Format, "json", "text")
	if f := c.Log.AccessLogFlushS; !finite(float64(f)) || f <= 0 || f > 10 {
		ck.fail("log.access_log_flush_s", "must be a number of seconds greater than 0 and at most 10, got %v", float64(f))
	}
	ck.cluster(c.Cluster)
	ck.discovery(c.Discovery)
	c.checkListeners(ck)
	ck.checkFinite(c) // last: after every key's own check
}

func (c *Config) validateEngines(ck *checker) {
	dynamic := c.Discovery.configured()
	if len(c.Engines) == 0 && !dynamic {
		ck.fail("engines", "lists no engine; add at least one prefill-capable and one decode-capable engine, or configure a discovery source")
		return
	}
	names := map[string]int{}
	canPrefill, canDecode := c.Discovery.roles()
	for i, e := range c.Engines {
		p := fmt.Sprintf("engines[%d]", i)
		if j, dup := names[e.Name]; dup && engineName.MatchString(e.Name) {
			ck.fail(p+".name", "%q is already the name of engines[%d]; names must be unique", e.Name, j)
		}
		names[e.Name] = i
		ck.engine(p, e)
		ck.checkAllowedPorts(c, i, e)
		canPrefill = canPrefill || e.Role.CanPrefill()
		canDecode = canDecode || e.Role.CanDecode()
	}
	also := ""
	if dynamic {
		also = " (in the list or in a discovery source)"
	}
	if !canPrefill {
		ck.fail("engines", "no engine can run the prefill leg; give at least one the role prefill or both%s", also)
	}
	if !canDecode {
		ck.fail("engines", "no engine can run the decode leg; give at least one the role decode or both%s", also)
	}
}

// CheckEngine checks one engine as the engines list's entries are checked (name, url, role,
// max_inflight, models, kv), for an engine that comes from elsewhere than the file, such as a
// discovery source's registration. Its connector name is checked when the engine is
// provisioned (ProvisionEngine), against the registry the router runs with.
func CheckEngine(e Engine) error {
	ck := &checker{}
	ck.engine("", e)
	return errors.Join(ck.errs...)
}

// engine checks one engine's own keys at path p.
func (ck *checker) engine(p string, e Engine) {
	if !engineName.MatchString(e.Name) {
		ck.fail(joinPath(p, "name"), "%q is not a usable name (letters, digits, '_', '.', '-', up to 64, starting with a letter or digit)", e.Name)
	}
	if u, err := url.Parse(e.URL); err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Hostname() == "" ||
		(u.Path != "" && u.Path != "/") || u.RawQuery != "" {
		ck.fail(joinPath(p, "url"), "%q is not an engine base URL; write http://host:port or https://host:port (no path)", e.URL)
	} else if port := u.Port(); port != "" {
		ck.port(joinPath(p, "url"), e.URL, port, false)
	}
	ck.oneOf(joinPath(p, "role"), string(e.Role), string(RolePrefill), string(RoleDecode), string(RoleBoth))
	if e.KV.Endpoint != "" {
		ck.hostPort(joinPath(p, "kv.endpoint"), e.KV.Endpoint, false)
	}
	if e.KVEvents.Endpoint != KVEventsOff {
		ck.kvEventsEndpoint(joinPath(p, "kv_events.endpoint"), e.KVEvents.Endpoint, false)
	} else if e.KVEvents.ReplayEndpoint != "" {
		ck.fail(joinPath(p, "kv_events.replay_endpoint"), "is set but kv_events.endpoint is %q: leave it out", KVEventsOff)
	}
	ck.kvEventsEndpoint(joinPath(p, "kv_events.replay_endpoint"), e.KVEvents.ReplayEndpoint, false)
	ck.engineFields(p, e)
}

// engineFields checks the keys an engine shares with a discovery source's template.
func (ck *checker) engineFields(p string, e Engine) {
	if e.MaxInflight < 0 {
		ck.fail(joinPath(p, "max_inflight"), "must be 0 (no cap) or more, got %d", e.MaxInflight)
	}
	for j, m := range e.Models {
		if strings.TrimSpace(m) == "" {
			ck.fail(fmt.Sprintf("%s[%d]", joinPath(p, "models"), j), "is empty; write a model name as clients send it")
		}
	}
	if e.KV.Connector != "" && ck.connectors != nil && !ck.connectors.Has(e.KV.Connector) {
		ck.oneOf(joinPath(p, "kv.connector"), e.KV.Connector, ck.connectors.Names()...)
	}
	for j, a := range e.KV.AllowedEndpoints {
		path := fmt.Sprintf("%s[%d]", joinPath(p, "kv.allowed_endpoints"), j)
		if _, err := netip.ParsePrefix(a); err == nil {
			continue
		}
		if h, port, err := net.SplitHostPort(a); err != nil || h == "" || strings.ContainsAny(h, "/@ ") {
			ck.fail(path, "%q is not allowed; want a CIDR (10.0.0.0/8) or a host:port", a)
		} else {
			ck.port(path, a, port, false)
		}
	}
	for j, m := range e.KV.TransferModes {
		ck.oneOf(fmt.Sprintf("%s[%d]", joinPath(p, "kv.transfer_modes"), j), m, "pull", "push")
	}
}

// maxLocalStallBudget bounds disaggregation.local_stall_budget_s: streams held up for longer
// than this have missed any inter-token target an operator would set.
const maxLocalStallBudget = 10

// maxDrainDelay bounds server.drain_delay_s: load balancers notice a failing readiness check
// within seconds; minutes would only delay every shutdown.
const maxDrainDelay = 300

func (c *Config) checkPlacement(ck *checker) {
	d := c.Disaggregation
	ck.oneOf("disaggregation.policy", d.Policy, DisaggAuto, DisaggAlways, DisaggNever)
	if d.MinPromptTokens < 0 {
		ck.fail("disaggregation.min_prompt_tokens", "must be 0 (no short-prompt rule) or a token count, got %d", d.MinPromptTokens)
	}
	if d.PrefillSaturation <= 0 || d.PrefillSaturation > 1 {
		ck.fail("disaggregation.prefill_saturation", "must be a fraction greater than 0 and at most 1, got %v", d.PrefillSaturation)
	}
	if d.MaxLocalPromptTokens < d.MinPromptTokens {
		ck.fail("disaggregation.max_local_prompt_tokens", "must be at least disaggregation.min_prompt_tokens (%d), got %d", d.MinPromptTokens, d.MaxLocalPromptTokens)
	}
	if !(d.LocalStallBudgetS >= 0) || d.LocalStallBudgetS > maxLocalStallBudget {
		ck.fail("disaggregation.local_stall_budget_s", "must be 0 (no prediction: the saturation rule decides) to %d seconds, got %v", maxLocalStallBudget, float64(d.LocalStallBudgetS))
	}
	if d.DecodeHeadroom <= 0 || d.DecodeHeadroom > 1 {
		ck.fail("disaggregation.decode_headroom", "must be a fraction greater than 0 and at most 1, got %v", d.DecodeHeadroom)
	}
	p := c.Placement
	ck.oneOf("placement.policy", p.Policy, PlacePrefix, PlaceP2C, PlaceRoundRobin)
	if p.PrefixBlockWords < 1 {
		ck.fail("placement.prefix_block_words", "must be 1 or more words, got %d", p.PrefixBlockWords)
	}
	if p.PrefixIndexBlocks < 1 {
		ck.fail("placement.prefix_index_blocks", "must be 1 or more block hashes, got %d", p.PrefixIndexBlocks)
	}
	if p.LoadFactor < 1 {
		ck.fail("placement.load_factor", "must be 1 (strict balance) or more, got %v", p.LoadFactor)
	}
	ck.nonNegative("placement.scrape_interval_s", p.ScrapeIntervalS)
	ck.positive("placement.scrape_stale_s", p.ScrapeStaleS)
	ck.positive("placement.scrape_timeout_s", p.ScrapeTimeoutS)
	k := p.KVEvents
	ck.kvEventsEndpoint("placement.kv_events.endpoint", k.Endpoint, true)
	ck.kvEventsEndpoint("placement.kv_events.replay_endpoint", k.ReplayEndpoint, true)
	if k.ReplayEndpoint != "" && k.Endpoint == "" {
		ck.fail("placement.kv_events.replay_endpoint", "is set but placement.kv_events.endpoint is not: a replay fills gaps in a stream, so name the publisher too")
	}
	if k.MaxBlocks < 1 {
		ck.fail("placement.kv_events.max_blocks", "must be 1 or more (engine, block) pairs, got %d", k.MaxBlocks)
	}
	ck.positive("placement.kv_events.replay_timeout_s", k.ReplayTimeoutS)
	ck.positive("placement.kv_events.reconnect_s", k.ReconnectS)
}

// kvEventsEndpoint checks a KV event endpoint: tcp://host:port, where a fleet-wide pattern
// may write {host} for the engine's host; "" is none.
func (ck *checker) kvEventsEndpoint(path, v string, pattern bool) {
	if v == "" {
		return
	}
	want := "tcp://host:port"
	if pattern {
		want = "tcp://{host}:port or tcp://host:port"
	}
	rest, ok := strings.CutPrefix(v, "tcp://")
	if !ok {
		ck.fail(path, "%q is not a ZeroMQ TCP endpoint; write %s (vLLM's --kv-events-config endpoint, with the engine's address for its *)", v, want)
		return
	}
	if pattern {
		rest = strings.ReplaceAll(rest, kvEventsHost, "engine")
	}
	host, port, err := net.SplitHostPort(rest)
	if err != nil || host == "" || host == "*" || strings.ContainsAny(host, "{}/") {
		ck.fail(path, "%q is not a ZeroMQ TCP endpoint; write %s", v, want)
		return
	}
	if n, err := strconv.Atoi(port); err != nil || n < 1 || n > 65535 {
		ck.fail(path, "%q: port %q is not a port from 1 to 65535", v, port)
	}
}

// tracing checks tracing.*: the endpoint is a collector URL the chosen protocol can use.
func (ck *checker) tracing(t Tracing) {
	ck.oneOf("tracing.protocol", t.Protocol, TracingGRPC, TracingHTTP)
	if r := t.SampleRatio; !finite(r) || r < 0 || r > 1 {
		ck.fail("tracing.sample_ratio", "%v is not allowed; want a fraction from 0 (no request without a sampled parent is traced) to 1 (every one)", r)
	}
	if strings.TrimSpace(t.ServiceName) == "" {
		ck.fail("tracing.service_name", "must not be empty (it names Narwhal's spans in the tracing backend)")
	}
	seen := map[string]bool{}
	for i, h := range t.Headers {
		path := "tracing.headers[" + strconv.Itoa(i) + "]"
		switch name := strings.ToLower(h.Name); {
		case !headerName.MatchString(h.Name):
			ck.fail(path+".name", "%q is not an HTTP header name", h.Name)
		case seen[name]:
			ck.fail(path+".name", "%q is listed twice", h.Name)
		case strings.ContainsAny(h.Value, "\r\n\x00"):
			ck.fail(path+".value", "must not contain line breaks or NUL")
		}
		seen[strings.ToLower(h.Name)] = true
	}
	if t.OTLPEndpoint == "" {
		return
	}
	u, err := url.Parse(t.OTLPEndpoint)
	switch {
	case err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" || u.Port() == "":
		ck.fail("tracing.otlp_endpoint", "%q is not a collector URL; write http://host:port (no TLS) or https://host:port, e.g. http://127.0.0.1:4317", t.OTLPEndpoint)
	case u.User != nil || u.RawQuery != "" || u.Fragment != "":
		ck.fail("tracing.otlp_endpoint", "%q: no user, query or fragment (credentials go in tracing.headers)", t.OTLPEndpoint)
	case t.Protocol == TracingGRPC && u.Path != "" && u.Path != "/":
		ck.fail("tracing.otlp_endpoint", "%q: an OTLP/gRPC endpoint has no path (only protocol: http takes one, e.g. /v1/traces)", t.OTLPEndpoint)
	}
}

// headerName is an HTTP header field name (RFC 9110 token).
var headerName = regexp.MustCompile("^[!#$%&'*+.^_`|~0-9A-Za-z-]+$")
