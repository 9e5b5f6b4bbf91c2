package config

import (
	"net"
	"strconv"
	"strings"
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
	// Tokens is where a prompt's token ids come from (config/tokens.go).
	Tokens Tokens `yaml:"tokens"`
	// LoRAAffinity places a LoRA adapter's requests by the engines' adapter state
	// (actors/placement/lora.go; docs/lora.md): off, adapters are placed like base models.
	LoRAAffinity bool `yaml:"lora_affinity"`
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

func defaultDisaggregation() Disaggregation {
	return Disaggregation{Policy: DisaggAuto, MinPromptTokens: 256, PrefillSaturation: 0.9, DecodeHeadroom: 0.7,
		MaxLocalPromptTokens: 1024, LocalStallBudgetS: 0.25}
}

func defaultPlacement() Placement {
	return Placement{Policy: PlacePrefix, PrefixBlockWords: 64, PrefixIndexBlocks: 1 << 18,
		LoadFactor: 1.25, ScrapeIntervalS: 0, ScrapeStaleS: 5, ScrapeTimeoutS: 1,
		KVEvents: KVEvents{MaxBlocks: 1 << 20, ReplayTimeoutS: 2, ReconnectS: 1}, Tokens: defaultTokens(), LoRAAffinity: true}
}

// maxLocalStallBudget bounds disaggregation.local_stall_budget_s: streams held up for longer
// than this have missed any inter-token target an operator would set.
const maxLocalStallBudget = 10

func (d Disaggregation) check(ck *checker) {
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
}

func (p Placement) check(ck *checker) {
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
	p.KVEvents.check(ck)
	p.Tokens.check(ck)
}

func (k KVEvents) check(ck *checker) {
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

// kvEventsHost is the placeholder of placement.kv_events' patterns.
const kvEventsHost = "{host}"

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

// Endpoints are where to follow an engine's KV events: its own kv_events (own), else the
// fleet's patterns with its host; pub "" when none (or its endpoint is "off").
func (k KVEvents) Endpoints(own EngineKVEvents, host string) (pub, replay string) {
	pub, replay = own.Endpoint, own.ReplayEndpoint
	if pub == "" {
		pub = k.Endpoint
		if replay == "" {
			replay = k.ReplayEndpoint
		}
	}
	if pub == KVEventsOff {
		return "", ""
	}
	if strings.Contains(host, ":") {
		host = "[" + host + "]"
	}
	return strings.ReplaceAll(pub, kvEventsHost, host), strings.ReplaceAll(replay, kvEventsHost, host)
}
