package memory

import (
	"strings"
	"sync"
	"testing"
)

// The budget never lets more than its limit be held, whatever the concurrency, and everything
// reserved comes back.
func TestBudgetBounds(t *testing.T) {
	b := New(1000, Options{})
	defer b.Close()
	if !b.Reserve(1000) || b.Reserve(1) {
		t.Fatal("the limit itself must fit and one byte more must not")
	}
	b.Release(1000)
	var wg sync.WaitGroup
	var over sync.Once
	for range 8 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for range 10000 {
				if h, ok := b.Take(300); ok {
					if b.Held() > 1000 {
						over.Do(func() { t.Error("held more than the limit") })
					}
					h.Free()
					h.Free() // twice is once
				}
			}
		}()
	}
	wg.Wait()
	if b.Held() != 0 {
		t.Fatalf("%d bytes still held", b.Held())
	}
	var h Hold
	if !h.Grow(b, 600) || h.Grow(b, 600) || h.Size() != 600 {
		t.Fatalf("grow: size %d", h.Size())
	}
	h.Free()
	var nilBudget *Budget
	if !nilBudget.Reserve(1<<40) || nilBudget.Limit() != 0 {
		t.Fatal("a nil budget bounds nothing")
	}
	nilBudget.Release(1)
	nilBudget.Close()
}

// Read and ReadChunks: a known length is reserved before a byte is read; an unknown one as it
// arrives; past the limit ErrTooLarge, past the budget ErrNoRoom, and nothing stays held on
// failure.
func TestReadWithinBudget(t *testing.T) {
	b := New(4<<20, Options{})
	defer b.Close()
	body := strings.Repeat("x", 3<<20)
	got, h, err := Read(strings.NewReader(body), len(body), 8<<20, b)
	if err != nil || string(got) != body || b.Held() != int64(len(body)) {
		t.Fatalf("known length: %d bytes, held %d, %v", len(got), b.Held(), err)
	}
	if _, _, err := Read(strings.NewReader(body), len(body), 8<<20, b); err != ErrNoRoom {
		t.Fatalf("over the budget: %v", err)
	}
	h.Free()
	if _, _, err := Read(strings.NewReader(body), len(body), 1<<20, b); err != ErrTooLarge {
		t.Fatalf("over the limit: %v", err)
	}
	for _, read := range []func() (int, Hold, error){
		func() (int, Hold, error) {
			got, h, err := Read(strings.NewReader(body), -1, 8<<20, b)
			return len(got), h, err
		},
		func() (int, Hold, error) {
			chunks, h, err := ReadChunks(strings.NewReader(body), -1, 8<<20, b)
			n := 0
			for _, c := range chunks {
				n += len(c)
			}
			return n, h, err
		},
	} {
		n, h, err := read()
		if err != nil || n != len(body) || b.Held() < int64(n) {
			t.Fatalf("unknown length: %d bytes, held %d, %v", n, b.Held(), err)
		}
		h.Free()
	}
	if _, _, err := ReadChunks(strings.NewReader(strings.Repeat("y", 5<<20)), -1, 8<<20, b); err != ErrNoRoom {
		t.Fatalf("chunked over the budget: %v", err)
	}
	if b.Held() != 0 {
		t.Fatalf("%d bytes held after failures", b.Held())
	}
}
