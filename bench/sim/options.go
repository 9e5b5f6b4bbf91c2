package sim

import (
	"fmt"
	"time"

	json "github.com/goccy/go-json"
)

// Role says how a fleet uses an engine. Like vLLM, the simulator serves every kind of
// request whatever its role; the role is metadata reported in stats and fleet listings.
type Role string

// Engine roles.
const (
	RolePrefill Role = "prefill"
	RoleDecode  Role = "decode"
	RoleBoth    Role = "both"
)

// Values of Options.KVLayout and Options.KVLoadFailure.
const (
	// KVLayoutFlat advertises remote_block_ids as one flat list (NIXL v2).
	KVLayoutFlat = "flat"
	// KVLayoutGrouped advertises one block list per KV-cache group plus the newest
	// descriptor fields (dcp_size, pp_size, remote_num_tokens, ...).
	KVLayoutGrouped = "grouped"

	// KVLoadFail answers a decode whose KV load failed with an error (vLLM's
	// kv_load_failure_policy=fail).
	KVLoadFail = "fail"
	// KVLoadRecompute continues a decode whose KV load failed as if no transfer had
	// been asked for, paying the prefill time.
	KVLoadRecompute = "recompute"
)

// Defaults applied by Start to zero-valued Options fields.
const (
	DefaultModel       = "sim-model"
	DefaultVersion     = "0.14.1"
	DefaultTokens      = 16
	DefaultMaxModelLen = 4096
	DefaultKVLease     = 30 * time.Second
)

// Options configure one simulated engine. The zero value is a usable engine (role both,
// model sim-model, free loopback ports, no latency).
type Options struct {
	// Name labels the engine in fleets and logs (default "sim").
	Name string
	// Listen is the API listen address; "" means 127.0.0.1 with a free port.
	Listen string
	// Role is metadata; "" means RoleBoth.
	Role Role
	// EngineID is the KV identity; "" means a fresh UUID per Start.
	EngineID string
	// Models lists the served model names; empty means {"sim-model"}.
	Models []string

	// KVEndpoint is the side-channel listen address the engine advertises in its
	// descriptors; "" means 127.0.0.1 with a free port.
	KVEndpoint string
	// KVLayout is KVLayoutFlat (default) or KVLayoutGrouped.
	KVLayout string
	// KVLease is how long a producer keeps unread blocks pinned (default 30s).
	KVLease time.Duration
	// KVLoadFailure is KVLoadFail (default) or KVLoadRecompute.
	KVLoadFailure string

	// TTFT is the time to the first token of either leg: the prefill response time and
	// the decode's first token (which models the KV transfer).
	TTFT time.Duration
	// PrefillPerToken is added per prompt token whenever the engine computes the
	// prompt itself (prefill legs, decodes without a usable transfer).
	PrefillPerToken time.Duration
	// ITL is the gap between tokens; 0 means as fast as possible.
	ITL time.Duration
	// Tokens is the default output length (default 16); max_tokens caps it.
	Tokens int
	// MaxModelLen is the context length reported by /v1/models and enforced on
	// requests (default 4096).
	MaxModelLen int
	// Version is what /version reports (default "0.14.1").
	Version string
	// TPSize is the tp_size advertised in descriptors (default 1).
	TPSize int
	// DescriptorExtra is raw JSON members (`"a":1,"b":{"c":[2]}`) appended to every
	// descriptor, standing for runtime fields a router has never heard of.
	DescriptorExtra string
}

// normalized returns o with defaults applied, or an error naming the bad field.
func (o Options) normalized() (Options, error) {
	if o.Name == "" {
		o.Name = "sim"
	}
	if o.Listen == "" {
		o.Listen = "127.0.0.1:0"
	}
	switch o.Role {
	case "":
		o.Role = RoleBoth
	case RolePrefill, RoleDecode, RoleBoth:
	default:
		return o, fmt.Errorf("role %q: want prefill, decode or both", o.Role)
	}
	if len(o.Models) == 0 {
		o.Models = []string{DefaultModel}
	}
	o.Models = append([]string(nil), o.Models...)
	for _, m := range o.Models {
		if m == "" {
			return o, fmt.Errorf("models: empty model name")
		}
	}
	if o.KVEndpoint == "" {
		o.KVEndpoint = "127.0.0.1:0"
	}
	if o.DescriptorExtra != "" && !json.Valid([]byte("{"+o.DescriptorExtra+"}")) {
		return o, fmt.Errorf("descriptor extra %q: want JSON object members such as \"a\":1", o.DescriptorExtra)
	}
	switch o.KVLayout {
	case "":
		o.KVLayout = KVLayoutFlat
	case KVLayoutFlat, KVLayoutGrouped:
	default:
		return o, fmt.Errorf("kv layout %q: want flat or grouped", o.KVLayout)
	}
	if o.KVLease == 0 {
		o.KVLease = DefaultKVLease
	}
	switch o.KVLoadFailure {
	case "":
		o.KVLoadFailure = KVLoadFail
	case KVLoadFail, KVLoadRecompute:
	default:
		return o, fmt.Errorf("kv load failure policy %q: want fail or recompute", o.KVLoadFailure)
	}
	if o.Tokens == 0 {
		o.Tokens = DefaultTokens
	}
	if o.MaxModelLen == 0 {
		o.MaxModelLen = DefaultMaxModelLen
	}
	if o.Version == "" {
		o.Version = DefaultVersion
	}
	if o.TPSize == 0 {
		o.TPSize = 1
	}
	switch {
	case o.KVLease < 0:
		return o, fmt.Errorf("kv lease %v: must be positive", o.KVLease)
	case o.TTFT < 0, o.PrefillPerToken < 0, o.ITL < 0:
		return o, fmt.Errorf("latencies must not be negative (ttft %v, prefill per token %v, itl %v)",
			o.TTFT, o.PrefillPerToken, o.ITL)
	case o.Tokens < 1:
		return o, fmt.Errorf("tokens %d: must be at least 1", o.Tokens)
	case o.MaxModelLen < 2:
		return o, fmt.Errorf("max model len %d: must be at least 2", o.MaxModelLen)
	case o.TPSize < 1:
		return o, fmt.Errorf("tp size %d: must be at least 1", o.TPSize)
	}
	return o, nil
}
