package tests

import (
	"encoding/binary"
	"fmt"
	"io"
	"net"
	"runtime"
	"sync/atomic"
	"testing"
	"time"

	"github.com/narwhal-router/narwhal/bench/sim"
	"github.com/narwhal-router/narwhal/config"
)

// zmtpPublisher is a hostile KV event publisher on loopback: it speaks the ZMTP 3 greeting and
// READY handshake as a PUB socket would, then sends one of scripts per connection, in turn,
// and hangs up once the subscriber does. It counts the connections it took.
type zmtpPublisher struct {
	endpoint string
	accepted atomic.Int64
}

// zmtpGreeting is a ZMTP 3.0 greeting with the NULL mechanism (RFC 23): signature, version,
// mechanism, as-server, filler; 64 bytes.
func zmtpGreeting() []byte {
	g := make([]byte, 64)
	g[0], g[9], g[10] = 0xff, 0x7f, 3
	copy(g[12:], "NULL")
	return g
}

// zmtpReady is the READY command of a PUB socket.
func zmtpReady() []byte {
	body := append([]byte{5}, "READY"...)
	body = append(append(body, 11), "Socket-Type"...)
	body = append(binary.BigEndian.AppendUint32(body, 3), "PUB"...)
	return append([]byte{0x04, byte(len(body))}, body...) // command, short
}

// zmtpMessage is a three-frame message (topic, sequence, payload) as vLLM publishes a batch.
func zmtpMessage(seq uint64, payload []byte) []byte {
	var b []byte
	frames := [][]byte{{}, binary.BigEndian.AppendUint64(nil, seq), payload}
	for i, f := range frames {
		flags := byte(0x01) // more
		if i == len(frames)-1 {
			flags = 0
		}
		if len(f) > 255 {
			b = binary.BigEndian.AppendUint64(append(b, flags|0x02), uint64(len(f)))
		} else {
			b = append(b, flags, byte(len(f)))
		}
		b = append(b, f...)
	}
	return b
}

func startHostilePublisher(t *testing.T, scripts ...func(w io.Writer)) *zmtpPublisher {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	p := &zmtpPublisher{endpoint: "tcp://" + ln.Addr().String()}
	done := make(chan struct{})
	t.Cleanup(func() { ln.Close(); <-done })
	go func() {
		defer close(done)
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			n := p.accepted.Add(1)
			go func() {
				defer c.Close()
				_, _ = c.Write(zmtpGreeting())
				scripts[int(n-1)%len(scripts)](c)
				_ = c.SetReadDeadline(time.Now().Add(5 * time.Second))
				_, _ = io.Copy(io.Discard, c) // until the subscriber hangs up
			}()
		}
	}()
	return p
}

// A KV event publisher that sends what no vLLM sends — a READY command claiming a terabyte, a
// 2 GiB frame followed by real bytes, a 29-byte batch claiming 2³²−1 block hashes — is hung
// up on, counted as hostile and followed again after the backoff, while the router keeps
// serving every request and keeps following the other engines' events. Nothing it claims is
// allocated: the whole test allocates far less than one of its claims.
func TestHostileKVEventPublisherNeverStopsTheRouter(t *testing.T) {
	claims := []func(w io.Writer){
		func(w io.Writer) { // a READY command claiming 1 TiB, inside the handshake
			_, _ = w.Write(binary.BigEndian.AppendUint64([]byte{0x04 | 0x02}, 1<<40))
		},
		func(w io.Writer) { // a 2 GiB frame, then 16 MiB of it
			_, _ = w.Write(zmtpReady())
			_, _ = w.Write(binary.BigEndian.AppendUint64([]byte{0x01 | 0x02}, 2<<30))
			chunk := make([]byte, 1<<20)
			for range 16 {
				if _, err := w.Write(chunk); err != nil {
					return
				}
			}
		},
		func(w io.Writer) { // a BlockRemoved batch whose block_hashes claims 2^32-1 entries
			_, _ = w.Write(zmtpReady())
			batch := []byte{0x92, 0xcb, 0, 0, 0, 0, 0, 0, 0, 0, 0x91, 0x92, 0xac}
			batch = append(batch, "BlockRemoved"...)
			batch = append(batch, 0xdd, 0xff, 0xff, 0xff, 0xff)
			_, _ = w.Write(zmtpMessage(0, batch))
		},
	}
	hostile := startHostilePublisher(t, claims...)
	var victim string
	s := eventsSetup(sim.Options{}, config.TokenSource{Source: config.TokensRender}, func(c *config.Config) {
		c.Placement.KVEvents.ReconnectS = 0.05 // 50 ms, doubling: a few hostile rounds within a second or two
	})
	fleetConfig := s.fleetConfig
	s.fleetConfig = func(f *sim.Fleet, c *config.Config) {
		fleetConfig(f, c)
		victim = c.Engines[0].Name
		c.Engines[0].KVEvents = config.EngineKVEvents{Endpoint: hostile.endpoint}
	}

	var before runtime.MemStats
	runtime.ReadMemStats(&before)
	h := start(t, s)
	hostileSeries := fmt.Sprintf(`narwhal_kv_events_total{engine=%q,result="hostile"}`, victim)
	// Every claim was met at least once, each on a fresh connection after the backoff.
	h.waitMetricAtLeast(hostileSeries, float64(len(claims)))
	if n := hostile.accepted.Load(); n < int64(len(claims)) {
		t.Fatalf("the publisher took %d connections, want at least %d (followed again after each hang-up)", n, len(claims))
	}

	// Meanwhile every request is served, and the other engines' events still reach the index.
	for i := range 12 {
		r := h.send("/v1/completions", completions(words(fmt.Sprintf("hostile%d", i), 40)))
		if r.status != 200 {
			t.Fatalf("request %d: status %d while a publisher was hostile: %s", i, r.status, r.body)
		}
	}
	batches := 0.0
	eventually(t, 10*time.Second, func() bool {
		batches = 0
		for _, e := range h.fleet.Engines[1:] {
			batches += h.metric(fmt.Sprintf(`narwhal_kv_events_total{engine=%q,result="batch"}`, e.Name()))
		}
		return batches > 0
	}, func() string { return "no batch from the healthy engines reached the index" })
	if n := h.metric(fmt.Sprintf(`narwhal_kv_events_total{engine=%q,result="batch"}`, victim)); n != 0 {
		t.Fatalf("%v batches of the hostile publisher were applied", n)
	}
	// The victim is still placed (on the estimate), not ejected: a publisher is not the engine.
	for _, e := range h.engines() {
		if e.State != "admitted" {
			t.Fatalf("engine %s is %s: a hostile event publisher cost an engine its place", e.Name, e.State)
		}
	}

	var after runtime.MemStats
	runtime.ReadMemStats(&after)
	// The fleet, the router and the requests allocate tens of MiB; one honoured claim would be
	// 2 GiB (the frame) or 32 GiB (the hashes as []uint64).
	if got := after.TotalAlloc - before.TotalAlloc; got > 1<<30 {
		t.Fatalf("the test allocated %d MiB: a hostile claim was honoured", got>>20)
	}
}
