package sim

import (
	"context"
	"fmt"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/narwhal-router/narwhal/internal/testwait"
	"github.com/narwhal-router/narwhal/transport/kvevents"
)

// An engine of four data-parallel ranks: each rank has its own prefix cache, the header picks
// the rank (a repeat hits only on the rank that computed the prompt), a rank out of range is
// vLLM's 400, a header that is no integer leaves the choice to the API server's balancer, and
// /metrics shows each rank under its engine label.
func TestRanksEachHaveTheirOwnCache(t *testing.T) {
	e := startEngine(t, Options{MaxNumSeqs: 4, KVBlocks: 256, MaxModelLen: 1024, Tokens: 2, DataParallelSize: 4})
	prompt := strings.Repeat("alpha beta gamma delta ", 16) // 64 words: 4 blocks of 16
	complete := func(header ...string) (int, []byte) {
		t.Helper()
		status, _, body := post(t, e.URL(), "/v1/completions", fmt.Sprintf(`{"prompt":%q,"max_tokens":2}`, prompt), header...)
		return status, body
	}
	for range 2 {
		if status, body := complete(rankHeader, "2"); status != 200 {
			t.Fatalf("rank 2: %d %s", status, body)
		}
	}
	st := e.Stats()
	if len(st.Ranks) != 4 || st.Ranks[2].Requests != 2 || st.Ranks[2].PrefixCacheHits == 0 {
		t.Fatalf("rank 2 served the prompt twice and must hit its own cache on the repeat: %+v", st.Ranks)
	}
	if status, _ := complete(rankHeader, "1"); status != 200 || e.Stats().Ranks[1].PrefixCacheHits != 0 {
		t.Fatalf("rank 1 hit a prompt only rank 2 computed: %+v", e.Stats().Ranks)
	}
	status, body := complete(rankHeader, "4")
	if status != 400 || !strings.Contains(string(body), `data_parallel_rank 4 is out of range [0, 4).`) || !strings.Contains(string(body), "BadRequestError") {
		t.Fatalf("rank 4 of 4: %d %s", status, body)
	}
	before := e.Stats().Ranks
	if status, body := complete(rankHeader, "two"); status != 200 {
		t.Fatalf("a header that is no integer is ignored by vLLM: %d %s", status, body)
	}
	var balanced int64
	for i, r := range e.Stats().Ranks {
		balanced += r.Requests - before[i].Requests
	}
	if balanced != 1 {
		t.Fatalf("the balanced request was counted on %d ranks", balanced)
	}
	_, _, metrics := get(t, e.URL()+"/metrics")
	for n := range 4 {
		want := fmt.Sprintf(`vllm:num_requests_running{engine="%d",model_name="sim-model"} `, n)
		if !strings.Contains(string(metrics), want) {
			t.Fatalf("no %s in\n%s", want, metrics)
		}
	}
	if !strings.Contains(string(metrics), `vllm:prefix_cache_hits_total{engine="2",model_name="sim-model"} 64.0`) {
		t.Fatalf("rank 2's prefix hits are not its own series:\n%s", metrics)
	}
}

// Without the header, vLLM's balancer sends a request to the rank of least waiting × 4 +
// running; under concurrent load every rank takes some.
func TestRanksBalanceRequestsWithoutTheHeader(t *testing.T) {
	e := startEngine(t, Options{MaxNumSeqs: 2, KVBlocks: 256, MaxModelLen: 1024, Tokens: 8, ITL: 5 * time.Millisecond, DataParallelSize: 3})
	done := make(chan int, 12)
	for i := range 12 {
		go func() {
			status, _, _ := post(t, e.URL(), "/v1/completions", fmt.Sprintf(`{"prompt":"p%d","max_tokens":8}`, i))
			done <- status
		}()
	}
	for range 12 {
		if s := <-done; s != 200 {
			t.Fatalf("status %d", s)
		}
	}
	for _, r := range e.Stats().Ranks {
		if r.Requests == 0 {
			t.Fatalf("a rank took none of 12 concurrent requests: %+v", e.Stats().Ranks)
		}
	}
}

// Each rank publishes its own KV events on the endpoint's port offset by its rank, with its
// data_parallel_rank in every batch.
func TestRanksPublishTheirOwnKVEvents(t *testing.T) {
	e := startEngine(t, Options{MaxNumSeqs: 4, KVBlocks: 256, MaxModelLen: 1024, Tokens: 2, DataParallelSize: 2,
		KVEvents: "tcp://127.0.0.1:0"})
	pub, _ := e.KVEvents()
	var rank atomic.Int64
	rank.Store(-1)
	sub := &kvevents.Subscriber{Endpoint: kvevents.RankEndpoint(pub, 1), Handle: func(_ uint64, b kvevents.Batch) {
		if b.DataParallelRank != nil {
			rank.Store(int64(*b.DataParallelRank))
		}
	}}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- sub.Run(ctx) }()
	t.Cleanup(func() { cancel(); <-done })
	i := 0
	testwait.UntilEvery(t, 10*time.Second, 5*time.Millisecond, func() bool {
		if rank.Load() >= 0 {
			return true
		}
		post(t, e.URL(), "/v1/completions", fmt.Sprintf(`{"prompt":%q,"max_tokens":1}`, strings.Repeat(fmt.Sprintf("w%d ", i), 40)), rankHeader, "1")
		i++
		return false
	}, func() string { return "rank 1's publisher sent nothing" })
	if rank.Load() != 1 {
		t.Fatalf("rank 1's batches say data_parallel_rank %d", rank.Load())
	}
}
