package actors

import (
	"context"
	"fmt"
	"os"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/narwhal-router/narwhal/config"
	"github.com/narwhal-router/narwhal/transport"
	"github.com/narwhal-router/narwhal/transport/kv"
)

// envInt is the integer in the environment variable name, or def.
func envInt(t *testing.T, name string, def int) int {
	v := os.Getenv(name)
	if v == "" {
		return def
	}
	n, err := strconv.Atoi(v)
	if err != nil || n <= 0 {
		t.Fatalf("%s=%q: want a positive integer", name, v)
	}
	return n
}

// GET /engines (Router.Engines) answers while engines are added and removed: every engine it
// lists has an actor to ask, and what it reads of them is published to it, so no answer is
// lost, nothing panics and the race detector sees nothing. By default 10 flips of 100 engines
// (the suite's share of two cores); NARWHAL_FLIPS=100 NARWHAL_FLIP_ENGINES=500 is the full run.
func TestEnginesAnswersWhileTheFleetFlips(t *testing.T) {
	flips, extra := envInt(t, "NARWHAL_FLIPS", 10), envInt(t, "NARWHAL_FLIP_ENGINES", 100)
	r, fleet := simRouter(t, 1, nil, Options{})
	prov := transport.NewProvisioner(kv.Builtin(), nil)
	spec := func(ce config.Engine) transport.EngineSpec {
		s, err := prov.Engine(ce)
		if err != nil {
			t.Fatal(err)
		}
		s.Source = "test"
		return s
	}
	var base []transport.EngineSpec
	for _, e := range fleet.Engines {
		base = append(base, spec(config.Engine{Name: e.Name(), URL: e.URL(), Role: config.Role(e.Role()), Models: e.Models(),
			KV: config.KV{Connector: kv.NIXL, Endpoint: e.KVEndpoint(), TransferModes: []string{"pull"}}}))
	}
	grown := append([]transport.EngineSpec(nil), base...)
	for i := range extra {
		// Nothing listens there: each joins, fails its check and is ejected, or is removed first.
		grown = append(grown, spec(config.Engine{Name: fmt.Sprintf("x%d", i), URL: "http://127.0.0.1:1", Role: config.RoleDecode,
			Models: []string{"m"}, KV: config.KV{Connector: kv.NIXL, TransferModes: []string{"pull"}}}))
	}

	ctx, stop := context.WithCancel(context.Background())
	var answers, lost atomic.Int64
	var firstErr atomic.Value
	var wg sync.WaitGroup
	for range 2 {
		wg.Go(func() {
			for ctx.Err() == nil {
				es, err := r.Engines(context.Background())
				if err != nil {
					lost.Add(1)
					firstErr.CompareAndSwap(nil, err.Error())
					continue
				}
				for _, e := range es {
					if e.Name == "" || e.State == "" {
						lost.Add(1)
						firstErr.CompareAndSwap(nil, fmt.Sprintf("an engine without a name or state: %+v", e))
					}
				}
				answers.Add(1)
			}
		})
	}
	// Adding hundreds of engines takes the pool a while on a loaded machine: a generous bound.
	setCtx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	for i := range flips {
		if err := r.SetEngines(setCtx, grown); err != nil {
			t.Fatalf("flip %d, add: %v", i, err)
		}
		if err := r.SetEngines(setCtx, base); err != nil {
			t.Fatalf("flip %d, remove: %v", i, err)
		}
	}
	stop()
	wg.Wait()
	if n := lost.Load(); n > 0 {
		t.Fatalf("%d of %d answers of /engines lost over %d flips of %d engines; the first: %v", n, n+answers.Load(), flips, extra, firstErr.Load())
	}
	if answers.Load() == 0 {
		t.Fatal("no answer of /engines while the fleet flipped")
	}
	t.Logf("%d answers of /engines over %d flips of %d engines, none lost", answers.Load(), flips, extra)
}
