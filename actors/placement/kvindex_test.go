package placement

import (
	"testing"

	"github.com/narwhal-router/narwhal/transport/blockkey"
	"github.com/narwhal-router/narwhal/transport/kvevents"
)

// The test engines' blocks are 4 tokens; block n of a test prompt is four tokens n, and an
// engine names it by a hash of its own (the engine's seed scrambles n).
const testBlock = 4

func tokensOf(ns ...uint64) []uint32 {
	var ids []uint32
	for _, n := range ns {
		ids = append(ids, uint32(n), uint32(n), uint32(n), uint32(n))
	}
	return ids
}

// keysOf are the router's keys of a prompt made of blocks ns (no adapter, no salt).
func keysOf(ns ...uint64) []uint64 {
	return blockkey.Keys(nil, tokensOf(ns...), testBlock, blockkey.Extra{})
}

// storedBy is engine seed's BlockStored of blocks ns following block parent (0: none).
func storedBy(seed, parent uint64, ns ...uint64) kvevents.BlockStored {
	ev := kvevents.BlockStored{TokenIDs: tokensOf(ns...), BlockSize: testBlock}
	for _, n := range ns {
		ev.BlockHashes = append(ev.BlockHashes, n*seed)
	}
	if parent != 0 {
		p := parent * seed
		ev.ParentBlockHash = &p
	}
	return ev
}

func removedBy(seed uint64, ns ...uint64) kvevents.BlockRemoved {
	ev := kvevents.BlockRemoved{}
	for _, n := range ns {
		ev.BlockHashes = append(ev.BlockHashes, n*seed)
	}
	return ev
}

func batchOf(evs ...kvevents.Event) kvevents.Batch { return kvevents.Batch{Events: evs} }

// An engine whose events are live is matched on what it said it holds, and only that, for a
// prompt whose tokens are known: the estimate's entries for it are ignored; the others keep
// their estimate. For a prompt known only by its words, every engine keeps the estimate.
func TestExactIndexReplacesTheEstimateForEnginesWithEvents(t *testing.T) {
	e := NewExactIndex(100)
	x := NewPrefixIndex(1<<10, e)
	a, b := x.TakeSlot(), x.TakeSlot()
	prompt := keysOf(1, 2, 3)
	x.Record(prompt, a) // our placements say a and b served the prompt
	x.Record(prompt, b)
	words := []uint64{11, 12, 13} // the same engines served a prompt whose tokens were not known
	x.Record(words, a)
	x.Record(words, b)
	en := e.Open(a)
	if m := matchOf(x, prompt); m.of(a) != 3 {
		t.Fatalf("before its first batch engine a is matched on the estimate: %v", m)
	}
	const seed = 7919
	e.Apply(en, batchOf(storedBy(seed, 0, 1, 2)))
	if m := matchOf(x, prompt); m.of(a) != 2 || m.of(b) != 3 {
		t.Fatalf("live events: a holds 2 blocks by its events, b 3 by the estimate; got %v", m)
	}
	if m := matchOf(x, words); m.of(a) != 3 || m.of(b) != 3 {
		t.Fatalf("a prompt of words: both engines are matched on the estimate; got %v", m)
	}
	gpu, cpu := "GPU", "CPU"
	offloaded := storedBy(seed, 2, 3)
	offloaded.Medium = &cpu
	gone := removedBy(seed, 2)
	gone.Medium = &cpu
	e.Apply(en, batchOf(offloaded, gone))
	if m := matchOf(x, prompt); m.of(a) != 2 {
		t.Fatalf("blocks offloaded to CPU changed the GPU index: %v", m)
	}
	gone.Medium = &gpu
	e.Apply(en, batchOf(gone))
	if m := matchOf(x, prompt); m.of(a) != 1 {
		t.Fatalf("after BlockRemoved(2): %v", m)
	}
	e.Apply(en, batchOf(kvevents.AllBlocksCleared{}))
	if m := matchOf(x, prompt); m.of(a) != 0 || e.Held(en) != 0 || e.blocks.len() != 0 || len(en.keys) != 0 {
		t.Fatalf("after AllBlocksCleared: %v, %d held, %d in the index, %d engine hashes", m, e.Held(en), e.blocks.len(), len(en.keys))
	}
	// A gap lost for good: the engine's entries go, and it is matched on the estimate again.
	e.Apply(en, batchOf(storedBy(seed, 0, 1)))
	e.Lost(en)
	if m := matchOf(x, prompt); m.of(a) != 3 || e.IsLive(a) {
		t.Fatalf("after a lost gap engine a should fall back to the estimate: %v", m)
	}
	// The engine leaves: its part is forgotten and a late batch from its feed changes nothing.
	e.Apply(en, batchOf(storedBy(seed, 0, 1, 2, 3)))
	x.Retire(a)
	e.Apply(en, batchOf(storedBy(seed, 0, 1, 2, 3)))
	if m := matchOf(x, prompt); m.of(a) != 0 || len(e.engines) != 0 || e.pairs != 0 {
		t.Fatalf("after the engine left: %v, %d engines, %d pairs", m, len(e.engines), e.pairs)
	}
}

// The re-hash: whatever an engine calls its blocks, the router keys them by their tokens,
// chained through the parent the engine names, with the extra keys vLLM hashed into them.
func TestExactIndexKeysEventsByTheirTokens(t *testing.T) {
	adapter, salt := "sql-lora", "tenant-1"
	withExtra := func(ev kvevents.BlockStored, lora *string, extra [][]string) kvevents.BlockStored {
		ev.LoraName, ev.ExtraKeys = lora, extra
		return ev
	}
	short := storedBy(3, 0, 1, 2)
	short.TokenIDs = short.TokenIDs[:7]
	for _, c := range []struct {
		name   string
		events []kvevents.Event
		prompt []uint64
		want   int
	}{
		{"one event, the engine's own hashes", []kvevents.Event{storedBy(3, 0, 1, 2, 3)}, keysOf(1, 2, 3), 3},
		{"another seed, the same keys", []kvevents.Event{storedBy(1_000_003, 0, 1, 2, 3)}, keysOf(1, 2, 3), 3},
		{"a chain over three events", []kvevents.Event{storedBy(3, 0, 1), storedBy(3, 1, 2), storedBy(3, 2, 3)}, keysOf(1, 2, 3), 3},
		{"a parent never seen: not keyed", []kvevents.Event{storedBy(3, 9, 1, 2)}, keysOf(1, 2), 0},
		{"another prompt's blocks 2 and 3", []kvevents.Event{storedBy(3, 0, 5), storedBy(3, 5, 2, 3)}, keysOf(1, 2, 3), 0},
		{"tokens missing: not keyed", []kvevents.Event{short}, keysOf(1, 2), 0},
		{"removed by the engine's hash", []kvevents.Event{storedBy(3, 0, 1, 2, 3), removedBy(3, 3)}, keysOf(1, 2, 3), 2},
		{"a removal of another engine's hash changes nothing", []kvevents.Event{storedBy(3, 0, 1, 2), removedBy(5, 2)}, keysOf(1, 2), 2},
		{"an adapter's blocks do not match the base model's",
			[]kvevents.Event{withExtra(storedBy(3, 0, 1, 2), &adapter, [][]string{{adapter}, {adapter}})}, keysOf(1, 2), 0},
		{"an adapter's blocks match its prompts",
			[]kvevents.Event{withExtra(storedBy(3, 0, 1, 2), &adapter, [][]string{{adapter}, {adapter}})},
			blockkey.Keys(nil, tokensOf(1, 2), testBlock, blockkey.Extra{Adapter: adapter}), 2},
		{"an adapter named without extra_keys (older vLLM)",
			[]kvevents.Event{withExtra(storedBy(3, 0, 1, 2), &adapter, nil)},
			blockkey.Keys(nil, tokensOf(1, 2), testBlock, blockkey.Extra{Adapter: adapter}), 2},
		{"a salted prompt matches its salt",
			[]kvevents.Event{withExtra(storedBy(3, 0, 1, 2), nil, [][]string{{salt}, nil})},
			blockkey.Keys(nil, tokensOf(1, 2), testBlock, blockkey.Extra{Salt: salt}), 2},
		{"a salted prompt does not match the unsalted",
			[]kvevents.Event{withExtra(storedBy(3, 0, 1, 2), nil, [][]string{{salt}, nil})}, keysOf(1, 2), 0},
		{"a multimodal block matches no prompt of text",
			[]kvevents.Event{withExtra(storedBy(3, 0, 1, 2), nil, [][]string{nil, {"\x00\xa3img"}})}, keysOf(1, 2), 1},
	} {
		t.Run(c.name, func(t *testing.T) {
			e := NewExactIndex(100)
			x := NewPrefixIndex(1<<10, e)
			en := e.Open(x.TakeSlot())
			e.Apply(en, batchOf(c.events...))
			if got := matchOf(x, c.prompt).of(0); got != c.want {
				t.Fatalf("the prompt matches %d blocks, want %d", got, c.want)
			}
		})
	}
}

// The exact index holds at most max_blocks pairs, shared among the engines followed; past its
// share an engine's oldest stores are forgotten first, and with them the engine's names for
// them. Churn (store, remove, store) does not grow what it keeps per engine.
func TestExactIndexIsBoundedAndForgetsTheOldestFirst(t *testing.T) {
	e := NewExactIndex(10)
	a, b := e.Open(0), e.Open(1)
	for n := uint64(1); n <= 8; n++ {
		e.Apply(a, batchOf(storedBy(3, 0, n)))
	}
	if e.Held(a) != 5 || len(a.keys) != 5 {
		t.Fatalf("engine a holds %d blocks (%d engine hashes), want its share of 5", e.Held(a), len(a.keys))
	}
	for n := uint64(1); n <= 3; n++ {
		if v, _ := e.blocks.get(keysOf(n)[0]); v.has(0) {
			t.Fatalf("block %d, among the oldest, was kept", n)
		}
	}
	for n := uint64(100); n < 100+20_000; n++ {
		e.Apply(b, batchOf(storedBy(3, 0, n), removedBy(3, n)))
	}
	e.Apply(b, batchOf(storedBy(5, 0, 7), storedBy(5, 0, 8)))
	if e.pairs > 10 || len(b.order)-b.head > 2*len(b.held)+1024 || len(b.keys) > len(b.held) {
		t.Fatalf("%d pairs held (bound 10), %d stores remembered for %d blocks, %d engine hashes",
			e.pairs, len(b.order)-b.head, len(b.held), len(b.keys))
	}
	if m, _ := e.blocks.get(keysOf(8)[0]); !m.has(0) || !m.has(1) {
		t.Fatalf("block 8 is held by both engines: %+v", m)
	}
}
