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

	Restarts int64 `json:"restarts"`
}

// counters are the engine's live request counters; block counts live in blockTable.
type counters struct {
	prefill, decode, completed, aborted, inFlight atomic.Int64
	kvLoads, kvLoadFailures, restarts             atomic.Int64
	lastAbort                                     atomic.Int64 // unix nanoseconds
}

// Stats returns a snapshot of the engine's counters.
func (e *Engine) Stats() Stats {
	bc := e.blocks.counts(time.Now())
	return Stats{
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
	}
}

// appendMetrics renders the vLLM gauges a router or autoscaler reads, in Prometheus
// text format. The simulator has no scheduler queue: every generation in flight counts
// as running.
func (e *Engine) appendMetrics(b []byte) []byte {
	bc := e.blocks.counts(time.Now())
	labels := `{engine="0",model_name=` + strconv.Quote(e.opts.Models[0]) + `}`
	gauge := func(name, help string, v float64) {
		b = append(b, "# HELP "+name+" "+help+"\n# TYPE "+name+" gauge\n"+name+labels+" "...)
		b = appendFloat(b, v)
		b = append(b, '\n')
	}
	gauge("vllm:num_requests_running", "Number of requests in model execution batches.", float64(e.count.inFlight.Load()))
	gauge("vllm:num_requests_waiting", "Number of requests waiting to be processed.", 0)
	gauge("vllm:kv_cache_usage_perc", "KV-cache usage. 1 means 100 percent usage.",
		min(float64(bc.pinned)/kvCapacityBlocks, 1))
	return b
}

func unixNanoTime(ns int64) time.Time {
	if ns == 0 {
		return time.Time{}
	}
	return time.Unix(0, ns)
}
