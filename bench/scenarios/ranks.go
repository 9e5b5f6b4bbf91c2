package scenarios

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"math/rand/v2"
	"net"
	"net/http"
	"strings"
	"sync"
	"time"

	"github.com/narwhal-router/narwhal/bench/harness"
	"github.com/narwhal-router/narwhal/bench/report"
	"github.com/narwhal-router/narwhal/bench/sim"
	"github.com/narwhal-router/narwhal/config"
	"github.com/narwhal-router/narwhal/node"
	"github.com/narwhal-router/narwhal/transport/kv"
)

// Ranks measures the prefix hit rate of engines of four data-parallel ranks (issue #36) with
// the router choosing each request's rank (engines[].data_parallel_size: 4, the header
// X-data-parallel-rank) against the router blind to them (1: vLLM's own balancer picks by
// queue length), on the same workload in the same run: groups of requests sharing a long
// prefix, sent concurrently. The hit rate is the engines' own (the simulator's prefix-cache
// counters, summed over ranks), so it counts what the ranks' caches really served. It runs in
// process: the figure is a ratio of tokens, not a time.
func Ranks(env harness.Env) (*report.Section, error) {
	sec := report.NewSection("ranks", "prefix hit rate with data-parallel ranks routed against ranks left to vLLM (issue #36)")
	requests, prefixes := 480, 24
	if env.Quick {
		requests = 192
	}
	sec.Printf("workload: 2 engines × 4 ranks (capacity model, 8 sequences a rank), %d requests of %d prefixes of 256 words "+
		"plus 16 words of their own, 16 at a time, seeded order; prefix placement, local decodes", requests, prefixes)
	for _, arm := range []struct {
		name string
		size int
	}{{"routed", 4}, {"blurred", 1}} {
		hits, queries, err := runRanksArm(arm.size, requests, prefixes)
		if err != nil {
			return nil, fmt.Errorf("ranks %s: %w", arm.name, err)
		}
		rate := float64(hits) / float64(max(queries, 1))
		sec.Printf("%-8s prefix hit rate %.1f%% (%d of %d prompt tokens)", arm.name, 100*rate, hits, queries)
		sec.Figure("hit_rate_"+arm.name, rate)
	}
	return sec, nil
}

// runRanksArm runs the workload through a router placing the fleet with data_parallel_size
// size, and returns the ranks' prefix-cache hits and queries, in tokens.
func runRanksArm(size, requests, prefixes int) (hits, queries int64, err error) {
	fleet, err := sim.StartFleet(sim.FleetOptions{Both: 2, Engine: sim.Options{MaxNumSeqs: 8, Tokens: 4, DataParallelSize: 4,
		ITL: 2 * time.Millisecond, PrefillPerToken: 20 * time.Microsecond}})
	if err != nil {
		return 0, 0, err
	}
	defer fleet.Close()
	cfg := config.Default()
	cfg.Disaggregation.Policy = config.DisaggNever
	cfg.Placement.Policy = config.PlacePrefix
	cfg.Placement.PrefixBlockWords = 16
	cfg.Placement.ScrapeIntervalS = 0.1
	cfg.Server.DrainDelayS = 0
	for _, e := range fleet.Engines {
		cfg.Engines = append(cfg.Engines, config.Engine{Name: e.Name(), URL: e.URL(), Role: config.Role(e.Role()), Models: e.Models(),
			DataParallelSize: size, KV: config.KV{Connector: kv.NIXL, EngineID: e.EngineID(), Endpoint: e.KVEndpoint()}})
	}
	rt, err := node.Provision(cfg, kv.Builtin())
	if err != nil {
		return 0, 0, err
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return 0, 0, err
	}
	srv, err := node.Start(rt, node.Options{Logger: slog.New(slog.DiscardHandler), Listener: ln})
	if err != nil {
		return 0, 0, err
	}
	defer srv.Shutdown(context.Background())
	for deadline := time.Now().Add(15 * time.Second); ; time.Sleep(20 * time.Millisecond) {
		if ok, _ := srv.Router().Ready(); ok {
			break
		}
		if time.Now().After(deadline) {
			return 0, 0, fmt.Errorf("the router was not ready")
		}
	}
	before := rankCounters(fleet)
	rnd := rand.New(rand.NewPCG(36, 1))
	order := make([]int, requests)
	for i := range order {
		order[i] = rnd.IntN(prefixes)
	}
	client := &http.Client{Timeout: 30 * time.Second}
	work := make(chan int)
	errs := make(chan error, requests)
	var wg sync.WaitGroup
	for range 16 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range work {
				prompt := sim.Words(fmt.Sprintf("p%d_", order[i]), 256) + " " + sim.Words(fmt.Sprintf("q%d_", i), 16)
				resp, err := client.Post("http://"+srv.Addr()+"/v1/completions", "application/json",
					strings.NewReader(`{"model":"sim-model","prompt":"`+prompt+`","max_tokens":8}`))
				if err == nil {
					io.Copy(io.Discard, resp.Body)
					resp.Body.Close()
					if resp.StatusCode != 200 {
						err = fmt.Errorf("status %d", resp.StatusCode)
					}
				}
				if err != nil {
					errs <- err
				}
			}
		}()
	}
	for i := range order {
		work <- i
	}
	close(work)
	wg.Wait()
	close(errs)
	if err := <-errs; err != nil {
		return 0, 0, err
	}
	after := rankCounters(fleet)
	return after[0] - before[0], after[1] - before[1], nil
}

// rankCounters are the fleet's prefix-cache hits and queries, summed over every rank.
func rankCounters(f *sim.Fleet) [2]int64 {
	var c [2]int64
	for _, e := range f.Engines {
		st := e.Stats()
		c[0], c[1] = c[0]+st.PrefixCacheHits, c[1]+st.PrefixCacheQueries
	}
	return c
}
