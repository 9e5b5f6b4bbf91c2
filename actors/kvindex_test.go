package actors

import (
	"context"
	"log/slog"
	"sync"
	"testing"
	"time"

	"github.com/go-zeromq/zmq4"

	"github.com/narwhal-router/narwhal/config"
	"github.com/narwhal-router/narwhal/transport"
	"github.com/narwhal-router/narwhal/transport/kvevents"
	"github.com/narwhal-router/narwhal/transport/telemetry"
)

func stored(hs ...uint64) kvevents.BlockStored {
	return kvevents.BlockStored{BlockHashes: hs, BlockSize: 16}
}

func batchOf(evs ...kvevents.Event) kvevents.Batch { return kvevents.Batch{Events: evs} }

// An engine whose events are live is matched on what it said it holds, and only that: the
// estimate's entries for it are ignored; the others keep their estimate.
func TestExactIndexReplacesTheEstimateForEnginesWithEvents(t *testing.T) {
	e := newExactIndex(100)
	x := newPrefixIndex(1<<10, e)
	a, b := x.takeSlot(), x.takeSlot()
	x.record([]uint64{1, 2, 3}, a) // our placements say a and b served the prompt
	x.record([]uint64{1, 2, 3}, b)
	en := e.open(a)
	if m := matchOf(x, []uint64{1, 2, 3}); m.of(a) != 3 {
		t.Fatalf("before its first batch engine a is matched on the estimate: %v", m)
	}
	e.apply(en, batchOf(stored(1, 2)))
	if m := matchOf(x, []uint64{1, 2, 3}); m.of(a) != 2 || m.of(b) != 3 {
		t.Fatalf("live events: a holds 2 blocks by its events, b 3 by the estimate; got %v", m)
	}
	gpu, cpu := "GPU", "CPU"
	e.apply(en, batchOf(kvevents.BlockStored{BlockHashes: []uint64{3}, Medium: &cpu}, kvevents.BlockRemoved{BlockHashes: []uint64{2}, Medium: &cpu}))
	if m := matchOf(x, []uint64{1, 2, 3}); m.of(a) != 2 {
		t.Fatalf("blocks offloaded to CPU changed the GPU index: %v", m)
	}
	e.apply(en, batchOf(kvevents.BlockRemoved{BlockHashes: []uint64{2}, Medium: &gpu}))
	if m := matchOf(x, []uint64{1, 2, 3}); m.of(a) != 1 {
		t.Fatalf("after BlockRemoved(2): %v", m)
	}
	e.apply(en, batchOf(kvevents.AllBlocksCleared{}))
	if m := matchOf(x, []uint64{1, 2, 3}); m.of(a) != 0 || e.held(en) != 0 || e.blocks.len() != 0 {
		t.Fatalf("after AllBlocksCleared: %v, %d held, %d in the index", m, e.held(en), e.blocks.len())
	}
	// A gap lost for good: the engine's entries go, and it is matched on the estimate again.
	e.apply(en, batchOf(stored(1)))
	e.lost(en)
	if m := matchOf(x, []uint64{1, 2, 3}); m.of(a) != 3 || e.isLive(a) {
		t.Fatalf("after a lost gap engine a should fall back to the estimate: %v", m)
	}
	// The engine leaves: its part is forgotten and a late batch from its feed changes nothing.
	e.apply(en, batchOf(stored(1, 2, 3)))
	x.retire(a)
	e.apply(en, batchOf(stored(1, 2, 3)))
	if m := matchOf(x, []uint64{1, 2, 3}); m.of(a) != 0 || len(e.engines) != 0 || e.pairs != 0 {
		t.Fatalf("after the engine left: %v, %d engines, %d pairs", m, len(e.engines), e.pairs)
	}
}

// The exact index holds at most max_blocks pairs, shared among the engines followed; past its
// share an engine's oldest stores are forgotten first. Churn (store, remove, store) does not
// grow what it keeps per engine.
func TestExactIndexIsBoundedAndForgetsTheOldestFirst(t *testing.T) {
	e := newExactIndex(10)
	a, b := e.open(0), e.open(1)
	for h := uint64(1); h <= 8; h++ {
		e.apply(a, batchOf(stored(h)))
	}
	if e.held(a) != 5 {
		t.Fatalf("engine a holds %d blocks, want its share of 5", e.held(a))
	}
	for h := uint64(1); h <= 3; h++ {
		if v, _ := e.blocks.get(h); v.has(0) {
			t.Fatalf("block %d, among the oldest, was kept", h)
		}
	}
	for h := uint64(100); h < 100+20_000; h++ {
		e.apply(b, batchOf(stored(h), kvevents.BlockRemoved{BlockHashes: []uint64{h}}))
	}
	e.apply(b, batchOf(stored(7, 8)))
	if e.pairs > 10 || len(b.order)-b.head > 2*len(b.held)+1024 {
		t.Fatalf("%d pairs held (bound 10), %d stores remembered for %d blocks", e.pairs, len(b.order)-b.head, len(b.held))
	}
	if m, _ := e.blocks.get(8); !m.has(0) || !m.has(1) {
		t.Fatalf("block 8 is held by both engines: %+v", m)
	}
}

// testPublisher is an engine's KV event publisher as vLLM's ZmqEventPublisher behaves: a PUB
// socket, and a ROUTER replay socket answering from what it still buffers.
type testPublisher struct {
	t           *testing.T
	pub, replay zmq4.Socket
	mu          sync.Mutex
	buffer      map[uint64][]byte
	close       func()
}

func startTestPublisher(t *testing.T) *testPublisher {
	ctx, cancel := context.WithCancel(context.Background())
	p := &testPublisher{t: t, pub: zmq4.NewPub(ctx), replay: zmq4.NewRouter(ctx), buffer: map[uint64][]byte{}}
	if err := p.pub.Listen("tcp://127.0.0.1:0"); err != nil {
		t.Fatal(err)
	}
	if err := p.replay.Listen("tcp://127.0.0.1:0"); err != nil {
		t.Fatal(err)
	}
	done := make(chan struct{})
	p.close = func() {
		cancel()
		p.pub.Close()
		p.replay.Close()
		<-done
	}
	go func() {
		defer close(done)
		for {
			msg, err := p.replay.Recv()
			if err != nil {
				return
			}
			id, start, err := kvevents.ParseReplayRequest(msg.Frames)
			if err != nil {
				continue
			}
			p.mu.Lock()
			for seq := start; seq < start+1000; seq++ {
				if b, ok := p.buffer[seq]; ok {
					_ = p.replay.SendMulti(zmq4.NewMsgFrom(kvevents.ReplayReply(id, seq, b)...))
				}
			}
			p.mu.Unlock()
			_ = p.replay.SendMulti(zmq4.NewMsgFrom(kvevents.ReplayEnd(id)...))
		}
	}()
	var once sync.Once
	closeSockets := p.close
	p.close = func() { once.Do(closeSockets) }
	t.Cleanup(func() { p.close() })
	return p
}

func (p *testPublisher) endpoints() (string, string) {
	return "tcp://" + p.pub.Addr().String(), "tcp://" + p.replay.Addr().String()
}

// send publishes batch seq (live unless hold: then only the replay buffer has it, as a batch
// the PUB socket dropped) and buffers it for replay unless lose.
func (p *testPublisher) send(seq uint64, b kvevents.Batch, hold, lose bool) {
	payload, err := kvevents.AppendBatch(nil, b)
	if err != nil {
		p.t.Fatal(err)
	}
	if !lose {
		p.mu.Lock()
		p.buffer[seq] = payload
		p.mu.Unlock()
	}
	if !hold {
		m := kvevents.Message{Seq: seq, Payload: payload}
		if err := p.pub.SendMulti(zmq4.NewMsgFrom(m.Frames()...)); err != nil {
			p.t.Fatal(err)
		}
	}
}

// eventually waits up to 10 s for cond: long enough for a ZeroMQ reconnect on a loaded machine.
func eventually(t *testing.T, what string, cond func() bool) {
	t.Helper()
	waitWithin(t, 10*time.Second, func() string { return what }, cond)
}

// A feed follows one engine's stream into the exact index over real ZeroMQ sockets: a gap the
// replay socket can fill is filled, one it cannot drops the engine's entries (it starts over
// from the next batch), a publisher that starts over is noticed, and an engine that leaves is
// forgotten with its feed stopped.
func TestKVFeedFillsGapsByReplayAndStartsOverWhenItCannot(t *testing.T) {
	p := startTestPublisher(t)
	pub, replay := p.endpoints()
	e := newExactIndex(1 << 10)
	x := newPrefixIndex(1<<10, e)
	f := startKVFeeds(config.KVEventsRuntime{Endpoint: pub, Replay: replay, MaxBlocks: 1 << 10,
		ReplayTimeout: 2 * time.Second, Reconnect: 50 * time.Millisecond}, e, telemetry.Noop(), slog.New(slog.DiscardHandler))
	defer f.stop()
	v := &engineView{Idx: x.takeSlot(), Name: "e0"}
	f.add(v, transport.EngineSpec{Name: "e0"})

	// ZeroMQ's PUB drops what it sends before the subscriber connects: empty batches until one
	// arrives, as an idle engine's steps would.
	seq := uint64(0)
	eventually(t, "the feed receives a batch", func() bool {
		p.send(seq, batchOf(), false, false)
		seq++
		return e.isLive(v.Idx)
	})
	p.send(seq, batchOf(stored(1, 2)), false, false)
	p.send(seq+1, batchOf(stored(3)), true, false) // dropped live, in the replay buffer
	p.send(seq+2, batchOf(stored(4)), false, false)
	seq += 3
	eventually(t, "the gap is filled by replay", func() bool { return matchOf(x, []uint64{1, 2, 3, 4}).of(v.Idx) == 4 })

	p.send(seq, batchOf(stored(5)), true, true) // lost for good
	p.send(seq+1, batchOf(stored(9)), false, false)
	seq += 2
	eventually(t, "a lost gap drops what the engine held", func() bool {
		return matchOf(x, []uint64{1}).of(v.Idx) == 0 && matchOf(x, []uint64{9}).of(v.Idx) == 1
	})

	p.send(0, batchOf(stored(7)), false, false) // the publisher restarted: numbers from 0
	eventually(t, "a restart starts the engine over", func() bool {
		return matchOf(x, []uint64{9}).of(v.Idx) == 0 && matchOf(x, []uint64{7}).of(v.Idx) == 1
	})

	f.remove(v)
	if m := matchOf(x, []uint64{7}); m.of(v.Idx) != 0 || e.isLive(v.Idx) {
		t.Fatalf("a removed engine is still indexed: %v", m)
	}
	p.send(1, batchOf(stored(8)), false, false)
	if m := matchOf(x, []uint64{8}); len(m) != 0 {
		t.Fatalf("a removed engine's feed still writes: %v", m)
	}
}

// An engine whose publisher goes away (the engine died, or its events were turned off) is
// placed on the estimate again; the feed keeps trying to follow it, and is counted.
func TestKVFeedFallsBackToTheEstimateWhenThePublisherGoesAway(t *testing.T) {
	p := startTestPublisher(t)
	pub, replay := p.endpoints()
	e := newExactIndex(1 << 10)
	x := newPrefixIndex(1<<10, e)
	f := startKVFeeds(config.KVEventsRuntime{Endpoint: pub, Replay: replay, MaxBlocks: 1 << 10,
		ReplayTimeout: time.Second, Reconnect: 20 * time.Millisecond}, e, telemetry.Noop(), slog.New(slog.DiscardHandler))
	defer f.stop()
	v := &engineView{Idx: x.takeSlot(), Name: "e0"}
	x.record([]uint64{1, 2}, v.Idx) // our own placement: the estimate
	f.add(v, transport.EngineSpec{Name: "e0"})
	seq := uint64(0)
	eventually(t, "the feed receives a batch", func() bool {
		p.send(seq, batchOf(stored(1)), false, false)
		seq++
		return e.isLive(v.Idx)
	})
	if m := matchOf(x, []uint64{1, 2}); m.of(v.Idx) != 1 {
		t.Fatalf("live: the events say one block, got %v", m)
	}
	p.close()
	eventually(t, "the engine falls back to the estimate", func() bool { return !e.isLive(v.Idx) })
	if m := matchOf(x, []uint64{1, 2}); m.of(v.Idx) != 2 {
		t.Fatalf("after the publisher went away the estimate should place it: %v", m)
	}
}
