package kvevents

import (
	"bytes"
	"context"
	"encoding/binary"
	"errors"
	"io"
	"net"
	"runtime"
	"strings"
	"testing"
	"time"
)

// allocated is the bytes f allocated (the test runs alone in its package's process while it
// measures; other goroutines' allocations only make the figure larger).
func allocated(f func()) uint64 {
	var before, after runtime.MemStats
	runtime.ReadMemStats(&before)
	f()
	runtime.ReadMemStats(&after)
	return after.TotalAlloc - before.TotalAlloc
}

// batchPrefix is a batch of one event up to that event's first field: [ts 0, [[tag, …
func batchPrefix(tag string, fields int) []byte {
	b := []byte{0x92, 0xcb, 0, 0, 0, 0, 0, 0, 0, 0, 0x91, 0x90 | byte(fields+1), 0xa0 | byte(len(tag))}
	return append(b, tag...)
}

// array32 is an array32 header claiming n elements.
func array32(n uint32) []byte { return binary.BigEndian.AppendUint32([]byte{0xdd}, n) }

// Every count a payload claims is checked against the bytes present and the documented maxima
// before anything is allocated: a batch of a few dozen bytes claiming 4 billion hashes (32 GiB
// as []uint64) or token IDs (16 GiB) is refused for what it is, allocating almost nothing.
func TestDecodeRefusesClaimsBeyondThePayload(t *testing.T) {
	deep := append(batchPrefix(TagAllBlocksCleared, 1), bytes.Repeat([]byte{0x91}, 1<<20)...)
	cases := map[string][]byte{
		"block_hashes claims 2^32-1":         append(batchPrefix(TagBlockRemoved, 1), array32(1<<32-1)...),
		"token_ids claims 2^32-1":            append(append(batchPrefix(TagBlockStored, 3), 0x91, 0x01, 0xc0), array32(1<<32-1)...),
		"events claims 2^32-1":               append([]byte{0x92, 0xcb, 0, 0, 0, 0, 0, 0, 0, 0}, array32(1<<32-1)...),
		"a map event claims 2^32-1":          {0x92, 0xcb, 0, 0, 0, 0, 0, 0, 0, 0, 0x91, 0xdf, 0xff, 0xff, 0xff, 0xff},
		"a tag claims 4 GiB":                 {0x92, 0xcb, 0, 0, 0, 0, 0, 0, 0, 0, 0x91, 0x91, 0xdb, 0xff, 0xff, 0xff, 0xff},
		"a hash claims 4 GiB":                append(batchPrefix(TagBlockRemoved, 1), 0x91, 0xc6, 0xff, 0xff, 0xff, 0xff),
		"hashes over the maximum":            append(append(batchPrefix(TagBlockRemoved, 1), array32(MaxHashesPerEvent+1)...), make([]byte, MaxHashesPerEvent+1)...),
		"block_size over the maximum":        append(batchPrefix(TagBlockStored, 4), 0x91, 0x01, 0xc0, 0x90, 0xcd, 0x40, 0x01),
		"a million nested arrays in a field": deep,
		"a payload over MaxMessageBytes":     make([]byte, MaxMessageBytes+1),
	}
	for name, raw := range cases {
		var err error
		n := allocated(func() { _, err = DecodeBatch(raw) })
		if err == nil {
			t.Errorf("%s (%d bytes): decoded", name, len(raw))
		}
		// What a refused payload may cost is a small multiple of its own size, never its claim.
		if limit := uint64(64<<10 + 8*len(raw)); n > limit {
			t.Errorf("%s (%d bytes): allocated %d bytes, want at most %d", name, len(raw), n, limit)
		}
	}
	if n := len(cases["block_hashes claims 2^32-1"]); n > 32 {
		t.Errorf("the 2^32-1 hashes batch is %d bytes", n)
	}
}

// hostilePublisher accepts one connection on loopback and, after a ZMTP greeting as a PUB
// socket (with a READY command if ready), writes what script writes, then reads and drops
// whatever the subscriber sends until it hangs up.
func hostilePublisher(t *testing.T, ready bool, script func(w io.Writer)) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { ln.Close() })
	go func() {
		c, err := ln.Accept()
		if err != nil {
			return
		}
		defer c.Close()
		greeting := make([]byte, greetingBytes)
		greeting[0], greeting[9], greeting[10] = 0xff, 0x7f, 3
		copy(greeting[12:], "NULL")
		if _, err := c.Write(greeting); err != nil {
			return
		}
		if ready {
			body := append([]byte{5}, "READY"...)
			body = append(append(body, 11), "Socket-Type"...)
			body = append(binary.BigEndian.AppendUint32(body, 3), "PUB"...)
			if _, err := c.Write(append([]byte{flagCommand, byte(len(body))}, body...)); err != nil {
				return
			}
		}
		script(c)
		_, _ = io.Copy(io.Discard, c) // until the subscriber hangs up
	}()
	return "tcp://" + ln.Addr().String()
}

// longHeader is a long frame header of flags claiming size bytes.
func longHeader(flags byte, size uint64) []byte {
	return binary.BigEndian.AppendUint64([]byte{flags | flagLong}, size)
}

// A publisher's frame header over the bounds closes the connection before the ZeroMQ library
// allocates what it claims: a terabyte in the READY handshake, 2 GiB after it (followed by
// real bytes), a message of endless small frames. Run returns an error wrapping ErrHostile.
func TestHostileFramesCloseTheStream(t *testing.T) {
	for name, script := range map[string]struct {
		ready bool
		write func(w io.Writer)
	}{
		"a 1 TiB READY command": {false, func(w io.Writer) { _, _ = w.Write(longHeader(flagCommand, 1<<40)) }},
		"a 2 GiB frame": {true, func(w io.Writer) {
			_, _ = w.Write(longHeader(flagMore, 2<<30))
			chunk := make([]byte, 1<<20)
			for range 64 {
				if _, err := w.Write(chunk); err != nil {
					return
				}
			}
		}},
		"a message of 10,000 frames": {true, func(w io.Writer) {
			_, _ = w.Write(bytes.Repeat([]byte{flagMore, 1, 'x'}, 10_000))
		}},
		"a frame with unknown flags": {true, func(w io.Writer) { _, _ = w.Write([]byte{0x80, 0}) }},
	} {
		t.Run(strings.ReplaceAll(name, " ", "_"), func(t *testing.T) {
			ep := hostilePublisher(t, script.ready, script.write)
			ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
			defer cancel()
			var err error
			n := allocated(func() {
				s := Subscriber{Endpoint: ep, Handle: func(uint64, Batch) { t.Error("a batch was delivered") }}
				err = s.Run(ctx)
			})
			if !errors.Is(err, ErrHostile) {
				t.Fatalf("Run returned %v, want ErrHostile", err)
			}
			if ctx.Err() != nil {
				t.Fatal("the stream was not closed before the deadline")
			}
			if n > 16<<20 {
				t.Fatalf("following the stream allocated %d MiB", n>>20)
			}
		})
	}
}

// A published batch that does not decode within the bounds ends the stream as hostile too.
func TestHostileBatchEndsTheStream(t *testing.T) {
	payload := append(batchPrefix(TagBlockRemoved, 1), array32(1<<32-1)...)
	ep := hostilePublisher(t, true, func(w io.Writer) {
		frames := [][]byte{{}, SeqBytes(0), payload}
		for i, f := range frames {
			flags := byte(flagMore)
			if i == len(frames)-1 {
				flags = 0
			}
			_, _ = w.Write(append([]byte{flags, byte(len(f))}, f...))
		}
	})
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	s := Subscriber{Endpoint: ep, Handle: func(uint64, Batch) { t.Error("a batch was delivered") }}
	if err := s.Run(ctx); !errors.Is(err, ErrHostile) || ctx.Err() != nil {
		t.Fatalf("Run returned %v, want ErrHostile before the deadline", err)
	}
}
