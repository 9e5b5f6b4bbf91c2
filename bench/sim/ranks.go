package sim

import (
	"errors"
	"fmt"
	"net/http"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"
)

// Data-parallel ranks, as vLLM serves them with --data-parallel-size N: one API server in
// front of N engine cores, each with its own scheduler, KV cache and prefix cache
// (Options.DataParallelSize; the capacity model gives each rank its scheduler). A request
// picks its rank with the header X-data-parallel-rank (vllm/entrypoints/openai/engine/
// serving.py, _get_data_parallel_rank): without it, or with a value that is not an integer,
// the API server balances the ranks itself (vllm/v1/engine/core_client.py,
// DPLBAsyncMPClient.get_core_engine_for_request: the least waiting × 4 + running, from
// counts the coordinator refreshes every 100 ms and the client bumps per request it sends);
// a rank outside [0, N) is refused with 400 (vllm/v1/engine/input_processor.py,
// process_inputs). Each rank's metrics carry its index as the engine label
// (vllm/v1/metrics/loggers.py), and each rank publishes its own KV events, on the configured
// ports offset by its rank, with data_parallel_rank set (vllm/distributed/kv_events.py,
// ZmqEventPublisher.offset_endpoint_port).

// rankHeader is vLLM's header naming a request's data-parallel rank.
const rankHeader = "X-data-parallel-rank"

// lbRefresh is how often vLLM's DP coordinator publishes the ranks' queue counts to the
// API server's balancer.
const lbRefresh = 100 * time.Millisecond

// rank is one engine core behind the API server.
type rank struct {
	sched *scheduler   // nil without the capacity model (one rank only)
	pub   *kvPublisher // nil unless KV events are on
	// requests counts the generations sent to the rank.
	requests atomic.Int64
}

// balancer is the API server's view of the ranks' queues, for requests without a rank.
type balancer struct {
	mu     sync.Mutex
	at     time.Time
	counts [][2]int // waiting, running per rank
}

func (o Options) checkRanks() error {
	switch {
	case o.DataParallelSize < 0 || o.DataParallelSize > 64:
		return fmt.Errorf("data parallel size %d: want 1 to 64 (0 is 1)", o.DataParallelSize)
	case o.DataParallelSize > 1 && o.MaxNumSeqs <= 0:
		return fmt.Errorf("data parallel size %d needs the capacity model (max num seqs > 0): each rank is a scheduler of its own", o.DataParallelSize)
	}
	return nil
}

// startRanks makes rank 0 of the engine's scheduler and publisher, and the other ranks
// with their own; their KV event endpoints are rank 0's, ports offset by the rank. When the
// configured ports are 0 (a free one), rank 0's publisher is bound again where every rank's
// ports are free (bindRankPublishers).
func (e *Engine) startRanks() error {
	e.ranks = []*rank{{sched: e.sched, pub: e.kvPub}}
	for n := 1; n < e.opts.DataParallelSize; n++ {
		e.ranks = append(e.ranks, &rank{sched: newScheduler(e.opts, func() { e.blocks.counts(time.Now()) })})
	}
	e.lb.counts = make([][2]int, len(e.ranks))
	if e.kvPub == nil || len(e.ranks) == 1 {
		return nil
	}
	pubs, err := e.bindRankPublishers()
	if err != nil {
		return err
	}
	e.kvPub = pubs[0]
	for n, r := range e.ranks {
		r.pub = pubs[n]
		r.pub.rank = n
		r.sched.kv.events, r.sched.kv.blockSize = true, e.opts.BlockSize
		r.sched.publish = r.pub.publish
	}
	return nil
}

// bindRankPublishers starts one publisher per rank on the configured endpoints offset by the
// rank. With port 0 configured, it takes rank 0's free ports and tries them for every rank,
// over again from other free ports when one is taken (a few tries).
func (e *Engine) bindRankPublishers() ([]*kvPublisher, error) {
	o := e.opts
	fixed := !strings.HasSuffix(o.KVEvents, ":0") && (o.KVEventsReplay == "" || !strings.HasSuffix(o.KVEventsReplay, ":0"))
	var lastErr error
	for try := 0; try < 8; try++ {
		pub, replay := e.kvPub.endpoints()
		pubs := []*kvPublisher{e.kvPub}
		var err error
		for n := 1; n < len(e.ranks) && err == nil; n++ {
			var p *kvPublisher
			if p, err = startKVPublisher(offsetPort(pub, n), offsetPort(replay, n), o.KVEventsTopic); err == nil {
				pubs = append(pubs, p)
			}
		}
		if err == nil {
			return pubs, nil
		}
		lastErr = err
		for _, p := range pubs[1:] {
			p.close()
		}
		if fixed {
			break
		}
		// Other free ports for rank 0, away from the ones that collided.
		e.kvPub.close()
		if e.kvPub, err = startKVPublisher(o.KVEvents, o.KVEventsReplay, o.KVEventsTopic); err != nil {
			return nil, err
		}
	}
	return nil, fmt.Errorf("kv events of %d ranks: %w", len(e.ranks), lastErr)
}

// offsetPort is a tcp://host:port endpoint with its port moved by n ("" stays "").
func offsetPort(endpoint string, n int) string {
	i := strings.LastIndexByte(endpoint, ':')
	if endpoint == "" || i < 0 {
		return endpoint
	}
	port, err := strconv.Atoi(endpoint[i+1:])
	if err != nil {
		return endpoint
	}
	return endpoint[:i+1] + strconv.Itoa(port+n)
}

// rankFor is the rank a generation request runs on: its header's, else the balancer's; an
// error for a rank the engine does not have.
func (e *Engine) rankFor(r *http.Request) (*rank, *apiError) {
	if v := r.Header.Get(rankHeader); v != "" {
		if n, err := strconv.Atoi(strings.TrimSpace(v)); err == nil {
			if n < 0 || n >= len(e.ranks) {
				return nil, newError(http.StatusBadRequest, "", fmt.Sprintf("data_parallel_rank %d is out of range [0, %d).", n, len(e.ranks)))
			}
			return e.ranks[n], nil
		}
	}
	if len(e.ranks) == 1 {
		return e.ranks[0], nil
	}
	return e.ranks[e.balance(time.Now())], nil
}

// balance is DPLBAsyncMPClient's choice: the rank of least waiting × 4 + running, the
// first on a tie, from counts refreshed every lbRefresh; the chosen rank's waiting count
// grows by one until the next refresh.
func (e *Engine) balance(now time.Time) int {
	lb := &e.lb
	lb.mu.Lock()
	defer lb.mu.Unlock()
	if now.Sub(lb.at) >= lbRefresh {
		for i, r := range e.ranks {
			c := r.sched.counts()
			lb.counts[i] = [2]int{c.waiting, c.running}
		}
		lb.at = now
	}
	best, score := 0, -1
	for i, c := range lb.counts {
		if s := c[0]*4 + c[1]; score < 0 || s < score {
			best, score = i, s
		}
	}
	lb.counts[best][0]++
	return best
}

// RankStats are one data-parallel rank's counters (Stats.Ranks).
type RankStats struct {
	Rank int `json:"rank"`
	// Requests counts the generations sent to the rank.
	Requests           int64 `json:"requests"`
	Running            int64 `json:"running"`
	Waiting            int64 `json:"waiting"`
	PrefixCacheQueries int64 `json:"prefix_cache_queries"`
	PrefixCacheHits    int64 `json:"prefix_cache_hits"`
}

// rankCounts are every rank's scheduler counts, in rank order (nil without the capacity
// model).
func (e *Engine) rankCounts() []schedCounts {
	if e.sched == nil {
		return nil
	}
	out := make([]schedCounts, len(e.ranks))
	for i, r := range e.ranks {
		out[i] = r.sched.counts()
	}
	return out
}

// sumCounts adds every rank's counts up, as the engine's.
func sumCounts(cs []schedCounts) schedCounts {
	var t schedCounts
	for _, c := range cs {
		t.running += c.running
		t.waiting += c.waiting
		t.blocksUsed += c.blocksUsed
		t.blocksCached += c.blocksCached
		t.queries += c.queries
		t.hits += c.hits
		t.computed += c.computed
		t.queued += c.queued
		t.steps += c.steps
		t.evicted += c.evicted
	}
	return t
}

// rankStats are the ranks' counters for Stats, nil for an engine of one rank.
func (e *Engine) rankStats(cs []schedCounts) []RankStats {
	if len(e.ranks) < 2 {
		return nil
	}
	out := make([]RankStats, len(e.ranks))
	for i, c := range cs {
		out[i] = RankStats{Rank: i, Requests: e.ranks[i].requests.Load(), Running: int64(c.running), Waiting: int64(c.waiting),
			PrefixCacheQueries: c.queries, PrefixCacheHits: c.hits}
	}
	return out
}

// runRanks runs every rank's scheduler past rank 0's (Start runs that one).
func (e *Engine) runRanks() {
	for _, r := range e.ranks[1:] {
		e.serve.Add(1)
		go func() {
			defer e.serve.Done()
			r.sched.run(e.ctx)
		}()
	}
}

// closeRanks closes the publishers of every rank past rank 0's.
func (e *Engine) closeRanks() error {
	var errs []error
	for _, r := range e.ranks[min(1, len(e.ranks)):] {
		if r.pub != nil {
			errs = append(errs, r.pub.close())
		}
	}
	return errors.Join(errs...)
}

// dropRankCaches empties every rank's prefix cache of the blocks no request holds.
func (e *Engine) dropRankCaches() {
	for _, r := range e.ranks {
		if r.sched != nil {
			r.sched.dropCached()
		}
	}
}
