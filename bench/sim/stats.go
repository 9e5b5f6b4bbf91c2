package sim

import (
	"strconv"
	"sync/atomic"
	"time"
)

// Stats are an engine's counters since Start (a Restart keeps them). GET /sim/stats
// returns them as JSON.
type Stats struct {
	Name       string `json:"name"`
	EngineID   string `json:"engine_id"`
	Role       Role   `json:"role"`
	URL        string `json:"url"`
	KVEndpoint string `json:"kv_endpoint"`

	// PrefillRequests and DecodeRequests count generations that passed validation, by leg.
	PrefillRequests int64 `json:"prefill_requests"`
	DecodeRequests  int64 `json:"decode_requests"`
	// Completed counts generations that ended without their client going away,
	// whatever the engine answered (faults included), so that
	// PrefillRequests+DecodeRequests = Completed+Aborted+InFlight.
	Completed int64 `json:"completed"`
	// Aborted counts generations whose client went away before the end.
	Aborted int64 `json:"aborted"`
	// LastAbort is when the engine last noticed a client going away (zero: never), so a test
	// can time the abort from the engine's side rather than from when it polled.
	LastAbort time.Time `json:"last_abort,omitzero"`
	// InFlight is the number of generations being served now.
	InFlight int64 `json:"in_flight"`

	// BlocksPinned is the number of blocks pinned now, waiting for a consumer.
	BlocksPinned int64 `json:"blocks_pinned"`
	// BlocksRead, BlocksExpired and BlocksDropped count blocks freed by a consumer's
	// read, by the lease running out and by Restart.
	BlocksRead    int64 `json:"blocks_read"`
	BlocksExpired int64 `json:"blocks_expired"`
	BlocksDropped int64 `json:"blocks_dropped"`

	// KVLoads counts decodes that read their blocks from a producer; KVLoadFailures
	// counts decodes whose transfer failed (malformed descriptor or failed read).
	KVLoads        int64 `json:"kv_loads"`
	KVLoadFailures int64 `json:"kv_load_failures"`
	// BlocksLoaded counts the KV blocks this engine pulled from producers (with the
	// capacity model, only those its prefix cache lacked): the blocks a transfer moved.
	BlocksLoaded int64 `json:"blocks_loaded"`

	Restarts int64 `json:"restarts"`

	// The capacity model's view (all zero when it is off).
	// Running and Waiting are the scheduler's sequences now (Waiting includes decodes
	// pulling their KV); Queued counts sequences a step passed over (they waited for a slot, step budget or blocks).
	Running int64 `json:"running"`
	Waiting int64 `json:"waiting"`
	Queued  int64 `json:"queued"`
	// KVBlocksUsed is the blocks held now (running sequences and pinned handoffs) of
	// KVBlocks; KVBlocksCached is the blocks with a prefix hash, held or evictable;
	// KVBlocksEvicted counts cached blocks evicted to make room.
	KVBlocksUsed    int64 `json:"kv_blocks_used"`
	KVBlocks        int64 `json:"kv_blocks"`
	KVBlocksCached  int64 `json:"kv_blocks_cached"`
	KVBlocksEvicted int64 `json:"kv_blocks_evicted"`
	// PrefixCacheQueries and PrefixCacheHits are prompt tokens looked up in the prefix
	// cache and found there (vLLM's counters); PromptTokensComputed counts prompt tokens
	// the engine computed; Steps counts scheduler steps.
	PrefixCacheQueries   int64 `json:"prefix_cache_queries"`
	PrefixCacheHits      int64 `json:"prefix_cache_hits"`
	PromptTokensComputed int64 `json:"prompt_tokens_computed"`
	Steps                int64 `json:"steps"`
	// Ranks are each data-parallel rank's counters (Options.DataParallelSize > 1); the
	// fields above add them up.
	Ranks []RankStats `json:"ranks,omitempty"`
	// LoRASwaps counts adapters loaded into a GPU slot (lora.go).
	LoRASwaps int64 `json:"lora_swaps"`
}

// counters are the engine's live request counters; block counts live in blockTable.
type counters struct {
	prefill, decode, completed, aborted, inFlight atomic.Int64
	kvLoads, kvLoadFailures, restarts             atomic.Int64
	blocksLoaded                                  atomic.Int64
	lastAbort                                     atomic.Int64 // unix nanoseconds
}

// ResetCounters zeroes the request counters of Stats (not what is in flight or held now, nor
// the block counts), so that a test sees only the traffic it sends — the end-to-end harness
// clears what the router's join checks sent before a test begins. Call it while nothing runs:
// PrefillRequests+DecodeRequests = Completed+Aborted+InFlight holds only then.
func (e *Engine) ResetCounters() {
	c := &e.count
	for _, n := range []*atomic.Int64{&c.prefill, &c.decode, &c.completed, &c.aborted, &c.kvLoads, &c.kvLoadFailures,
		&c.blocksLoaded, &c.lastAbort} {
		n.Store(0)
	}
	for _, r := range e.ranks {
		r.requests.Store(0)
	}
}

// Stats returns a snapshot of the engine's counters.
func (e *Engine) Stats() Stats {
	bc := e.blocks.counts(time.Now())
	st := Stats{
		Name:            e.opts.Name,
		EngineID:        e.EngineID(),
		Role:            e.opts.Role,
		URL:             e.url,
		KVEndpoint:      e.kvEndpoint,
		PrefillRequests: e.count.prefill.Load(),
		DecodeRequests:  e.count.decode.Load(),
		Completed:       e.count.completed.Load(),
		Aborted:         e.count.aborted.Load(),
		LastAbort:       unixNanoTime(e.count.lastAbort.Load()),
		InFlight:        e.count.inFlight.Load(),
		BlocksPinned:    bc.pinned,
		BlocksRead:      bc.read,
		BlocksExpired:   bc.expired,
		BlocksDropped:   bc.dropped,
		KVLoads:         e.count.kvLoads.Load(),
		KVLoadFailures:  e.count.kvLoadFailures.Load(),
		Restarts:        e.count.restarts.Load(),
		BlocksLoaded:    e.count.blocksLoaded.Load(),
	}
	if e.sched != nil {
		cs := e.rankCounts()
		c := sumCounts(cs)
		st.Ranks = e.rankStats(cs)
		st.Running, st.Waiting, st.Queued = int64(c.running), int64(c.waiting), c.queued
		st.KVBlocksUsed, st.KVBlocks = int64(c.blocksUsed), int64(e.opts.KVBlocks)
		st.KVBlocksCached, st.KVBlocksEvicted = int64(c.blocksCached), c.evicted
		st.PrefixCacheQueries, st.PrefixCacheHits = c.queries, c.hits
		st.PromptTokensComputed, st.Steps = c.computed, c.steps
		st.LoRASwaps = c.loraSwaps
	}
	return st
}

// appendMetrics renders the vLLM gauges and counters a router or autoscaler reads, in
// Prometheus text format, under vLLM's names and labels. Without the capacity model
// every generation in flight counts as running, nothing waits, the KV usage is the
// pinned blocks' share of KVBlocks and the prefix-cache counters stay 0.
func (e *Engine) appendMetrics(b []byte) []byte {
	bc := e.blocks.counts(time.Now())
	// One sample per data-parallel rank, labelled engine="<rank>" as vLLM labels each
	// engine core's (vllm/v1/metrics/loggers.py).
	ranks := []schedCounts{{running: int(e.count.inFlight.Load())}}
	if e.sched != nil {
		ranks = e.rankCounts()
	}
	usage := func(c schedCounts) float64 {
		if e.sched == nil {
			return min(float64(bc.pinned)/float64(e.opts.KVBlocks), 1)
		}
		return min(float64(c.blocksUsed)/float64(e.opts.KVBlocks), 1)
	}
	model := strconv.Quote(e.opts.Models[0])
	metric := func(name, typ, help, suffix string, v func(schedCounts) float64) {
		b = append(b, "# HELP "+name+" "+help+"\n# TYPE "+name+" "+typ+"\n"...)
		for i, c := range ranks {
			b = append(b, name+suffix+`{engine="`...)
			b = strconv.AppendInt(b, int64(i), 10)
			b = append(b, `",model_name=`+model+"} "...)
			b = appendFloat(b, v(c))
			b = append(b, '\n')
		}
	}
	metric("vllm:num_requests_running", "gauge", "Number of requests in model execution batches.", "",
		func(c schedCounts) float64 { return float64(c.running) })
	metric("vllm:num_requests_waiting", "gauge", "Number of requests waiting to be processed.", "",
		func(c schedCounts) float64 { return float64(c.waiting) })
	metric("vllm:kv_cache_usage_perc", "gauge", "KV-cache usage. 1 means 100 percent usage.", "", usage)
	// Counters follow prometheus_client's exposition: the TYPE line names the family,
	// the sample carries the _total suffix.
	metric("vllm:prefix_cache_queries", "counter", "Prefix cache queries, in terms of number of queried tokens.",
		"_total", func(c schedCounts) float64 { return float64(c.queries) })
	metric("vllm:prefix_cache_hits", "counter", "Prefix cache hits, in terms of number of cached tokens.",
		"_total", func(c schedCounts) float64 { return float64(c.hits) })
	// vLLM publishes its cache configuration as an info gauge; a router can read the
	// block size and capacity from it.
	caching := "False"
	if e.sched != nil {
		caching = "True"
	}
	b = append(b, "# HELP vllm:cache_config_info Information of the LLMEngine CacheConfig\n"+
		"# TYPE vllm:cache_config_info gauge\n"...)
	for i := range ranks {
		b = append(b, "vllm:cache_config_info{block_size=\""...)
		b = strconv.AppendInt(b, int64(e.opts.BlockSize), 10)
		b = append(b, `",cache_dtype=`...)
		b = strconv.AppendQuote(b, e.kvConfig().CacheDType)
		b = append(b, `,enable_prefix_caching="`+caching+`",engine="`...)
		b = strconv.AppendInt(b, int64(i), 10)
		b = append(b, `",num_gpu_blocks="`...)
		b = strconv.AppendInt(b, int64(e.opts.KVBlocks), 10)
		b = append(b, "\"} 1.0\n"...)
	}
	return e.appendLoRAMetrics(b)
}

func unixNanoTime(ns int64) time.Time {
	if ns == 0 {
		return time.Time{}
	}
	return time.Unix(0, ns)
}
