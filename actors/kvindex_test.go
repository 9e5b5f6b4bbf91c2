package actors

import (
	"context"
	"log/slog"
	"sync"
	"testing"
	"time"

	"github.com/go-zeromq/zmq4"

	"github.com/narwhal-router/narwhal/actors/placement"
	"github.com/narwhal-router/narwhal/config"
	"github.com/narwhal-router/narwhal/transport"
	"github.com/narwhal-router/narwhal/transport/blockkey"
	"github.com/narwhal-router/narwhal/transport/kvevents"
	"github.com/narwhal-router/narwhal/transport/telemetry"
)

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
	e := placement.NewExactIndex(1 << 10)
	x := placement.NewPrefixIndex(1<<10, e)
	f := startKVFeeds(config.KVEventsRuntime{Endpoint: pub, Replay: replay, MaxBlocks: 1 << 10,
		ReplayTimeout: 2 * time.Second, Reconnect: 50 * time.Millisecond}, e, telemetry.Noop(), slog.New(slog.DiscardHandler))
	defer f.stop()
	v := &placement.Engine{Idx: x.TakeSlot(), Name: "e0"}
	f.add(v, transport.EngineSpec{Name: "e0"})

	// ZeroMQ's PUB drops what it sends before the subscriber connects: empty batches until one
	// arrives, as an idle engine's steps would.
	seq := uint64(0)
	eventually(t, "the feed receives a batch", func() bool {
		p.send(seq, batchOf(), false, false)
		seq++
		return e.IsLive(v.Idx)
	})
	p.send(seq, batchOf(stored(0, 1, 2)), false, false)
	p.send(seq+1, batchOf(stored(2, 3)), true, false) // dropped live, in the replay buffer
	p.send(seq+2, batchOf(stored(3, 4)), false, false)
	seq += 3
	eventually(t, "the gap is filled by replay", func() bool { return x.Matches(keysOf(1, 2, 3, 4))[v.Idx] == 4 })

	p.send(seq, batchOf(stored(0, 5)), true, true) // lost for good
	p.send(seq+1, batchOf(stored(0, 9)), false, false)
	seq += 2
	eventually(t, "a lost gap drops what the engine held", func() bool {
		return x.Matches(keysOf(1))[v.Idx] == 0 && x.Matches(keysOf(9))[v.Idx] == 1
	})

	p.send(0, batchOf(stored(0, 7)), false, false) // the publisher restarted: numbers from 0
	eventually(t, "a restart starts the engine over", func() bool {
		return x.Matches(keysOf(9))[v.Idx] == 0 && x.Matches(keysOf(7))[v.Idx] == 1
	})

	f.remove(v)
	if m := x.Matches(keysOf(7)); m[v.Idx] != 0 || e.IsLive(v.Idx) {
		t.Fatalf("a removed engine is still indexed: %v", m)
	}
	p.send(1, batchOf(stored(0, 8)), false, false)
	if m := x.Matches(keysOf(8)); len(m) != 0 {
		t.Fatalf("a removed engine's feed still writes: %v", m)
	}
}

// An engine whose publisher goes away (the engine died, or its events were turned off) is
// placed on the estimate again; the feed keeps trying to follow it, and is counted.
func TestKVFeedFallsBackToTheEstimateWhenThePublisherGoesAway(t *testing.T) {
	p := startTestPublisher(t)
	pub, replay := p.endpoints()
	e := placement.NewExactIndex(1 << 10)
	x := placement.NewPrefixIndex(1<<10, e)
	f := startKVFeeds(config.KVEventsRuntime{Endpoint: pub, Replay: replay, MaxBlocks: 1 << 10,
		ReplayTimeout: time.Second, Reconnect: 20 * time.Millisecond}, e, telemetry.Noop(), slog.New(slog.DiscardHandler))
	defer f.stop()
	v := &placement.Engine{Idx: x.TakeSlot(), Name: "e0"}
	x.Record(keysOf(1, 2), v.Idx) // our own placement: the estimate
	f.add(v, transport.EngineSpec{Name: "e0"})
	seq := uint64(0)
	eventually(t, "the feed receives a batch", func() bool {
		p.send(seq, batchOf(stored(0, 1)), false, false)
		seq++
		return e.IsLive(v.Idx)
	})
	if m := x.Matches(keysOf(1, 2)); m[v.Idx] != 1 {
		t.Fatalf("live: the events say one block, got %v", m)
	}
	p.close()
	eventually(t, "the engine falls back to the estimate", func() bool { return !e.IsLive(v.Idx) })
	if m := x.Matches(keysOf(1, 2)); m[v.Idx] != 2 {
		t.Fatalf("after the publisher went away the estimate should place it: %v", m)
	}
}

// stored is a BlockStored of blocks ns after block parent (0: a prompt's first), block n being
// one token n and named n by the engine.
func stored(parent uint64, ns ...uint64) kvevents.BlockStored {
	ev := kvevents.BlockStored{BlockHashes: ns, BlockSize: 1}
	for _, n := range ns {
		ev.TokenIDs = append(ev.TokenIDs, uint32(n))
	}
	if parent != 0 {
		ev.ParentBlockHash = &parent
	}
	return ev
}

// keysOf are the router's keys of a prompt of the blocks ns.
func keysOf(ns ...uint64) []uint64 {
	ids := make([]uint32, len(ns))
	for i, n := range ns {
		ids[i] = uint32(n)
	}
	return blockkey.Keys(nil, ids, 1, blockkey.Extra{})
}

func batchOf(evs ...kvevents.Event) kvevents.Batch { return kvevents.Batch{Events: evs} }
