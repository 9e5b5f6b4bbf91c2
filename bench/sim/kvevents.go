package sim

import (
	"context"
	"errors"
	"fmt"
	"net"
	"sync"
	"sync/atomic"
	"time"

	"github.com/go-zeromq/zmq4"

	"github.com/narwhal-router/narwhal/bench/sim/kvwire"
)

// KV cache events, as vLLM publishes them with --kv-events-config (kvwire writes the bytes,
// from vLLM's kv_events.py): with Options.KVEvents set, each scheduler step whose prefix cache changed
// publishes one KVEventBatch — BlockStored when a prompt's computed blocks enter the cache,
// BlockRemoved when blocks are evicted to make room (or dropped by a restart while others
// are still held), AllBlocksCleared when a restart empties it — on a ZeroMQ PUB socket, and
// a ROUTER socket answers replay requests from the last kvEventsBuffer batches.

// kvEventsBuffer is how many batches the replay socket can send again (vLLM's buffer_steps).
const kvEventsBuffer = 10_000

// kvEventsQueue bounds the batches waiting to be sent; past it a batch is dropped (and
// counted), as vLLM's publisher drops past its high-water mark: a step never waits for a
// subscriber. A dropped batch keeps its sequence number, so a subscriber sees the gap.
const kvEventsQueue = 4096

type kvPublisher struct {
	pub, replay zmq4.Socket
	topic       []byte
	rank        int // the data-parallel rank whose events these are (ranks.go)
	queue       chan kvwire.Batch
	// queued counts the batches handed to publish, dropped those it could not queue,
	// published those sent.
	queued, dropped, published atomic.Int64

	mu     sync.Mutex
	seq    uint64 // the next batch's number
	buffer []bufferedBatch
	head   int // buffer is a ring once full: buffer[head] is the oldest

	cancel context.CancelFunc
	done   sync.WaitGroup
}

type bufferedBatch struct {
	seq     uint64
	payload []byte
}

// startKVPublisher binds the PUB socket to endpoint and, if replay is not "", the ROUTER
// to replay (tcp://host:port; port 0 takes a free one).
func startKVPublisher(endpoint, replay, topic string) (*kvPublisher, error) {
	ctx, cancel := context.WithCancel(context.Background())
	p := &kvPublisher{topic: []byte(topic), queue: make(chan kvwire.Batch, kvEventsQueue), cancel: cancel}
	p.pub = zmq4.NewPub(ctx)
	if err := p.pub.Listen(endpoint); err != nil {
		cancel()
		p.pub.Close()
		return nil, fmt.Errorf("kv events: listen %s: %w", endpoint, err)
	}
	if replay != "" {
		p.replay = zmq4.NewRouter(ctx)
		if err := p.replay.Listen(replay); err != nil {
			cancel()
			p.pub.Close()
			p.replay.Close()
			return nil, fmt.Errorf("kv events: listen replay %s: %w", replay, err)
		}
		p.done.Add(1)
		go p.serveReplay()
	}
	p.done.Add(1)
	go p.run(ctx)
	return p, nil
}

// endpoints are the bound PUB and replay addresses as tcp:// URLs ("" for no replay).
func (p *kvPublisher) endpoints() (pub, replay string) {
	pub = "tcp://" + p.pub.Addr().String()
	if p.replay != nil {
		replay = "tcp://" + p.replay.Addr().String()
	}
	return pub, replay
}

// publish queues one batch of events without waiting.
func (p *kvPublisher) publish(events []kvwire.Event) {
	b := kvwire.Batch{TS: float64(time.Now().UnixNano()) / 1e9, Events: events, DataParallelRank: p.rank}
	p.queued.Add(1)
	select {
	case p.queue <- b:
	default:
		p.mu.Lock()
		p.seq++ // the number is spent: subscribers see the gap
		p.mu.Unlock()
		p.dropped.Add(1)
	}
}

func (p *kvPublisher) run(ctx context.Context) {
	defer p.done.Done()
	for {
		select {
		case <-ctx.Done():
			return
		case b := <-p.queue:
			payload := kvwire.Append(nil, b)
			p.mu.Lock()
			seq := p.seq
			p.seq++
			if len(p.buffer) < kvEventsBuffer {
				p.buffer = append(p.buffer, bufferedBatch{seq, payload})
			} else {
				p.buffer[p.head] = bufferedBatch{seq, payload}
				p.head = (p.head + 1) % len(p.buffer)
			}
			p.mu.Unlock()
			if p.pub.SendMulti(zmq4.NewMsgFrom(kvwire.Frames(p.topic, seq, payload)...)) == nil {
				p.published.Add(1)
			}
		}
	}
}

// serveReplay answers replay requests until the socket closes.
func (p *kvPublisher) serveReplay() {
	defer p.done.Done()
	for {
		msg, err := p.replay.Recv()
		if err != nil {
			return // closed
		}
		id, start, err := kvwire.ParseReplayRequest(msg.Frames)
		if err != nil {
			continue // vLLM logs and ignores a malformed request
		}
		for _, b := range p.since(start) {
			if p.replay.SendMulti(zmq4.NewMsgFrom(kvwire.ReplayFrames(id, b.seq, b.payload)...)) != nil {
				break
			}
		}
		_ = p.replay.SendMulti(zmq4.NewMsgFrom(kvwire.ReplayEndFrames(id)...))
	}
}

// since returns the buffered batches numbered start or later, oldest first.
func (p *kvPublisher) since(start uint64) []bufferedBatch {
	p.mu.Lock()
	defer p.mu.Unlock()
	var out []bufferedBatch
	for i := range p.buffer {
		b := p.buffer[(p.head+i)%len(p.buffer)]
		if b.seq >= start {
			out = append(out, b)
		}
	}
	return out
}

// close stops both sockets and the goroutines. A connection a subscriber already closed
// is not an error.
func (p *kvPublisher) close() error {
	p.cancel()
	err := unlessClosed(p.pub.Close())
	if p.replay != nil {
		err = errors.Join(err, unlessClosed(p.replay.Close()))
	}
	p.done.Wait()
	return err
}

func unlessClosed(err error) error {
	if errors.Is(err, net.ErrClosed) {
		return nil
	}
	return err
}
