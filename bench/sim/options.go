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

	// DefaultBlockSize is vLLM's default KV block size in tokens.
	DefaultBlockSize = 16
	// DefaultKVBlocks is the size of the simulated KV cache in blocks, the figure
	// vllm:kv_cache_usage_perc is relative to.
	DefaultKVBlocks = 8192
	// DefaultMaxNumBatchedTokens is the token budget of one scheduler step with the
	// capacity model on (vLLM's max_num_batched_tokens for online serving).
	DefaultMaxNumBatchedTokens = 2048
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
	// CacheDType is the KV cache dtype (vLLM's --kv-cache-dtype, default "auto"), reported in
	// vllm:cache_config_info and part of the KV handshake's compatibility hash (handshake.go).
	CacheDType string
	// The capacity model (see README.md, "Capacity model"). It is off while MaxNumSeqs is
	// 0, and then every generation is timed on its own (TTFT, PrefillPerToken, ITL) as if
	// the engine had unbounded capacity.

	// MaxNumSeqs turns the capacity model on: at most this many sequences run at once
	// (vLLM's max_num_seqs); the others wait in a FIFO queue.
	MaxNumSeqs int
	// MaxNumBatchedTokens is the token budget of one step (decode tokens plus prefill
	// chunk tokens; default 2048), so a long prompt is prefilled in chunks.
	MaxNumBatchedTokens int
	// ITLPerSeq is added to a step's duration for every sequence in the step, so the
	// inter-token gap grows with the batch: step = ITL + ITLPerSeq × sequences +
	// PrefillPerToken × prefill tokens.
	ITLPerSeq time.Duration
	// KVBlocks is the KV cache size in blocks (default 8192); with the capacity model
	// on, a request waits until its blocks fit. It must hold MaxModelLen tokens.
	KVBlocks int
	// BlockSize is the number of prompt tokens per KV block and per prefix
	// hash (default 16, vLLM's).
	BlockSize int

	// TransferPerBlock is the time a consumer spends per KV block it pulls from a
	// producer (blocks it already holds in its prefix cache are not pulled).
	TransferPerBlock time.Duration
	// PromptTokensDetails reports usage.prompt_tokens_details.cached_tokens, as vLLM
	// does with --enable-prompt-tokens-details: prefix-cache hits plus, on a decode
	// leg, the tokens whose KV came from the producer.
	PromptTokensDetails bool

	// KVEvents, when set, publishes the capacity model's prefix-cache changes as vLLM's KV
	// cache events (--kv-events-config) on a ZeroMQ PUB socket bound there
	// ("tcp://127.0.0.1:5557"; port 0 takes a free one, Engine.KVEvents says which).
	// KVEventsReplay is the ROUTER replay socket's address ("" for none) and KVEventsTopic
	// the topic frame (vLLM's default: ""). They need the capacity model.
	KVEvents, KVEventsReplay, KVEventsTopic string

	// TokenizerJSON is a Hugging Face tokenizer.json (byte-level BPE) to tokenize with; ""
	// uses the simulator's own small one (bench/sim/tokenizer).
	TokenizerJSON string
	// HashAlgo is vLLM's --prefix-caching-hash-algo: sha256 (default), sha256_cbor, xxhash
	// or xxhash_cbor.
	HashAlgo string
	// HashSeed is PYTHONHASHSEED: nil gives every start a random NONE_HASH, as vLLM does, so
	// nothing outside the engine can reproduce its block hashes.
	HashSeed *string
	// LoRAModules are adapter names served next to the models (vLLM's --lora-modules): a
	// request for one has the adapter's name among its blocks' extra hash keys and in its
	// KV events (lora_name, lora_id = its 1-based position here).
	LoRAModules []string
	// MaxLoRAs is vLLM's --max-loras: how many adapters one batch may hold (LoRA is on when
	// it is set or LoRAModules are given; default 1 then). LoRASwap is the time a step takes
	// longer when an adapter enters a GPU slot it was not in (bench/sim/lora.go).
	MaxLoRAs int
	LoRASwap time.Duration

	// DescriptorExtra is raw JSON members (`"a":1,"b":{"c":[2]}`) appended to every
	// descriptor, standing for runtime fields a router has never heard of.
	DescriptorExtra string

	// DataParallelSize is vLLM's --data-parallel-size: this many ranks behind the one API
	// port, each with its own scheduler and prefix cache (ranks.go); 0 or 1 is one. More than
	// one needs the capacity model.
	DataParallelSize int
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
	if o.HashAlgo == "" {
		o.HashAlgo = "sha256"
	}
	o.LoRAModules = append([]string(nil), o.LoRAModules...)
	if o.MaxLoRAs < 0 {
		return o, fmt.Errorf("max loras %d: want 0 or more", o.MaxLoRAs)
	}
	if o.MaxLoRAs == 0 && len(o.LoRAModules) > 0 {
		o.MaxLoRAs = 1 // vLLM's default --max-loras
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
	if o.CacheDType == "" {
		o.CacheDType = "auto"
	}
	if o.TPSize == 0 {
		o.TPSize = 1
	}
	if o.BlockSize == 0 {
		o.BlockSize = DefaultBlockSize
	}
	if o.KVBlocks == 0 {
		o.KVBlocks = DefaultKVBlocks
	}
	if o.MaxNumBatchedTokens == 0 {
		o.MaxNumBatchedTokens = DefaultMaxNumBatchedTokens
	}
	if o.KVEvents == "" && o.KVEventsReplay != "" {
		return o, fmt.Errorf("kv events replay %q without kv events: set the PUB endpoint too", o.KVEventsReplay)
	}
	if err := o.checkRanks(); err != nil {
		return o, err
	}
	if o.KVEvents != "" && o.MaxNumSeqs <= 0 {
		return o, fmt.Errorf("kv events %q need the capacity model (max num seqs > 0): it owns the prefix cache they report", o.KVEvents)
	}
	switch {
	case o.MaxNumSeqs < 0:
		return o, fmt.Errorf("max num seqs %d: must not be negative (0 turns the capacity model off)", o.MaxNumSeqs)
	case o.BlockSize < 1:
		return o, fmt.Errorf("block size %d: must be at least 1", o.BlockSize)
	case o.KVBlocks < 1:
		return o, fmt.Errorf("kv blocks %d: must be at least 1", o.KVBlocks)
	case o.MaxNumBatchedTokens < 1:
		return o, fmt.Errorf("max num batched tokens %d: must be at least 1", o.MaxNumBatchedTokens)
	case o.ITLPerSeq < 0, o.TransferPerBlock < 0:
		return o, fmt.Errorf("latencies must not be negative (itl per seq %v, transfer per block %v)", o.ITLPerSeq, o.TransferPerBlock)
	case o.MaxNumSeqs > 0 && o.KVBlocks*o.BlockSize < o.MaxModelLen:
		// One request of the longest context must fit in an empty cache, or it would
		// wait forever.
		return o, fmt.Errorf("kv blocks %d × block size %d hold fewer tokens than max model len %d",
			o.KVBlocks, o.BlockSize, o.MaxModelLen)
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
