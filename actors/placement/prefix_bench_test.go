package placement

import (
	"fmt"
	"runtime"
	"testing"

	"github.com/narwhal-router/narwhal/config"
	"github.com/narwhal-router/narwhal/transport/blockkey"
	"github.com/narwhal-router/narwhal/transport/fault"
	"github.com/narwhal-router/narwhal/transport/kvevents"
)

// Placement at a thousand engines (250 producers, 750 consumers) with the prefix index full at
// 1M blocks: one decision is a consumer's pick and a producer's pick, each matching a
// 4,000-word prompt (62 blocks of 64 words) against the index. bench/README.md has the
// figures ("A thousand engines"); run with
//
//	go test -run '^$' -bench 'PlacementAtAThousandEngines|PrefixIndexMemory' -benchtime 2s ./actors/
func BenchmarkPlacementAtAThousandEngines(b *testing.B) {
	const producers, consumers, promptBlocks = 250, 750, 62
	for _, c := range []struct {
		name  string
		exact bool
		hot   bool // every engine holds the prompt's first block (one system prompt everywhere)
		p2c   bool // placement.policy p2c: two random draws, no index read
	}{{"estimate", false, false, false}, {"events", true, false, false}, {"estimate-hot-prefix", false, true, false},
		{"events-hot-prefix", true, true, false}, {"p2c", false, false, true}} {
		b.Run(c.name, func(b *testing.B) {
			exact := NewExactIndex(1 << 20)
			x := NewPrefixIndex(1<<20, exact)
			f := NewFleet(x, nil)
			var views []*Engine
			for i := range producers + consumers {
				role := config.RoleDecode
				if i < producers {
					role = config.RolePrefill
				}
				v := view(fmt.Sprintf("e%d", i), role, int32(i%7), 0)
				v.Idx = x.TakeSlot()
				views = append(views, v)
			}
			f.Publish(views)
			fillIndex(x, exact, views, c.exact)
			prompt := chain(1<<40, promptBlocks)
			if c.hot {
				for _, v := range views {
					x.Record(prompt[:1], v.Idx)
					if c.exact {
						exact.Apply(exact.engines[v.Idx], batchOf(storedChain(1<<40, 1)))
					}
				}
			}
			home := views[producers+17]
			x.Record(prompt[:40], home.Idx)
			if c.exact {
				exact.Apply(exact.engines[home.Idx], batchOf(storedChain(1<<40, 40)))
			}
			rules := &config.FleetRuntime{Placement: config.PlacePrefix, LoadFactor: 1.25}
			if c.p2c {
				rules.Placement = config.PlaceP2C
			}
			s := f.Load()
			b.ReportAllocs()
			b.ResetTimer()
			for b.Loop() {
				c := s.Place(Ask{Phase: fault.PhaseDecode, Model: "m", Blocks: prompt, Rules: rules})
				p := s.Place(Ask{Phase: fault.PhasePrefill, Model: "m", Blocks: prompt, Tokens: 4000, Rules: rules,
					Avoid: []string{c.Engine.Name}})
				if c.Engine == nil || p.Engine == nil {
					b.Fatal("no placement")
				}
			}
		})
	}
}

// chainTokens are the token ids of a prompt of n blocks, from seed.
func chainTokens(seed uint64, n int) []uint32 {
	out := make([]uint32, n*testBlock)
	for i := range out {
		seed = seed*6364136223846793005 + 1442695040888963407
		out[i] = uint32(seed >> 40)
	}
	return out
}

// chain is the keys of chainTokens(seed, n).
func chain(seed uint64, n int) []uint64 {
	return blockkey.Keys(nil, chainTokens(seed, n), testBlock, blockkey.Extra{})
}

// storedChain is an engine's BlockStored of chainTokens(seed, n), its hashes its own.
func storedChain(seed uint64, n int) kvevents.BlockStored {
	ev := kvevents.BlockStored{TokenIDs: chainTokens(seed, n), BlockSize: testBlock, BlockHashes: make([]uint64, n)}
	for i := range ev.BlockHashes {
		ev.BlockHashes[i] = seed ^ uint64(i)*0x9e3779b97f4a7c15
	}
	return ev
}

// fillIndex fills the estimate past its bound (it turns over and holds 0.5–1M blocks) with
// 32-block prompts spread over the engines and, with exact, the exact index with 1M (engine,
// block) pairs.
func fillIndex(x *PrefixIndex, exact *ExactIndex, views []*Engine, withExact bool) {
	for i := range 1 << 16 {
		x.Record(chain(uint64(i), 32), views[i%len(views)].Idx)
	}
	if !withExact {
		return
	}
	ens := make([]*ExactEngine, len(views))
	for i, v := range views {
		ens[i] = exact.Open(v.Idx)
	}
	for i := range 1 << 15 {
		exact.Apply(ens[i%len(ens)], batchOf(storedChain(uint64(i)+1<<30, 32)))
	}
}

// BenchmarkPrefixIndexMemory reports the heap each index takes per block at 1M: the estimate
// (block hashes, at its bound of 1M) and the exact index (1M (engine, block) pairs over 1,000
// engines).
func BenchmarkPrefixIndexMemory(b *testing.B) {
	for b.Loop() {
		before := heap()
		x := NewPrefixIndex(1<<20, nil)
		for i := range 1<<15 + 1<<14 - 1 { // 1.5M distinct blocks: one turnover, then a full newer generation
			x.Record(chain(uint64(i), 32), i%1000)
		}
		_, total := x.count()
		mid := heap()
		b.ReportMetric(float64(mid-before)/float64(total), "estimate-B/block")
		b.ReportMetric(float64(total), "estimate-blocks")
		e := NewExactIndex(1 << 20)
		ens := make([]*ExactEngine, 1000)
		for i := range ens {
			ens[i] = e.Open(i)
		}
		for i := range 1 << 15 {
			e.Apply(ens[i%1000], batchOf(storedChain(uint64(i), 32)))
		}
		after := heap()
		b.ReportMetric(float64(after-mid)/float64(e.pairs), "exact-B/pair")
		b.ReportMetric(float64(e.pairs), "exact-pairs")
		runtime.KeepAlive(x)
		runtime.KeepAlive(e)
	}
}

func heap() uint64 {
	runtime.GC()
	var m runtime.MemStats
	runtime.ReadMemStats(&m)
	return m.HeapAlloc
}

// BenchmarkPrefixMatchAtAMillionBlocks is the index's part of a placement: one prompt of 62
// blocks matched against 1M blocks over 1,000 engines, from the estimate and from events.
func BenchmarkPrefixMatchAtAMillionBlocks(b *testing.B) {
	for _, withExact := range []bool{false, true} {
		b.Run(map[bool]string{false: "estimate", true: "events"}[withExact], func(b *testing.B) {
			exact := NewExactIndex(1 << 20)
			x := NewPrefixIndex(1<<20, exact)
			views := make([]*Engine, 1000)
			for i := range views {
				views[i] = &Engine{Idx: x.TakeSlot()}
			}
			fillIndex(x, exact, views, withExact)
			prompt := chain(1<<40, 62)
			x.Record(prompt[:40], 17)
			if withExact {
				exact.Apply(exact.engines[17], batchOf(storedChain(1<<40, 40)))
			}
			var buf [32]slotDepth
			b.ReportAllocs()
			b.ResetTimer()
			for b.Loop() {
				if m := x.match(prompt, buf[:0]); m.of(17) != 40 {
					b.Fatalf("match %v", m)
				}
			}
		})
	}
}
