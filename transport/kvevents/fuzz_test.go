package kvevents

import (
	"bytes"
	"encoding/hex"
	"math"
	"runtime/metrics"
	"testing"
)

// heapAllocs is the bytes allocated on the heap so far (cheap to read: no stop of the world).
func heapAllocs() uint64 {
	s := []metrics.Sample{{Name: "/gc/heap/allocs:bytes"}}
	metrics.Read(s)
	return s[0].Value.Uint64()
}

// FuzzDecodeBatch feeds the decoder what a hostile publisher might send. Whatever the bytes,
// decoding allocates at most a small multiple of their length (the bound that keeps a claimed
// size from costing memory), and a batch that decodes re-encodes to bytes that decode to the same batch.
// `make fuzz` runs it under a virtual memory limit, so an allocation that slips past the check
// fails the run too.
func FuzzDecodeBatch(f *testing.F) {
	raw, _ := hex.DecodeString(vllmSample)
	f.Add(raw)
	f.Add(append(batchPrefix(TagBlockRemoved, 1), array32(1<<32-1)...))
	f.Add(append(append(batchPrefix(TagBlockStored, 3), 0x91, 0x01, 0xc0), array32(1<<32-1)...))
	f.Add([]byte{0x92, 0xcb, 0, 0, 0, 0, 0, 0, 0, 0, 0x91, 0x81, 0xa4, 't', 'y', 'p', 'e', 0xa4, 'N', 'o', 'p', 'e'})
	f.Fuzz(func(t *testing.T, payload []byte) {
		b, err := DecodeBatch(payload)
		// The counter is the process's: the fuzzing engine's own goroutines allocate now and
		// then. Decoding allocates the same every time, so the least of a few tries is its own.
		limit, least := uint64(64<<10+32*len(payload)), uint64(math.MaxUint64)
		for try := 0; try < 3 && least > limit; try++ {
			before := heapAllocs()
			_, _ = DecodeBatch(payload)
			least = min(least, heapAllocs()-before)
		}
		if least > limit {
			t.Fatalf("decoding %d bytes allocated %d, want at most %d", len(payload), least, limit)
		}
		if err != nil {
			return
		}
		again, err := AppendBatch(nil, b)
		if err != nil {
			t.Fatalf("a decoded batch does not encode: %v", err)
		}
		b2, err := DecodeBatch(again)
		if err != nil {
			t.Fatalf("a re-encoded batch does not decode: %v", err)
		}
		if third, _ := AppendBatch(nil, b2); !bytes.Equal(third, again) {
			t.Fatalf("re-encoded batch decodes to %#v, want %#v", b2, b)
		}
	})
}
