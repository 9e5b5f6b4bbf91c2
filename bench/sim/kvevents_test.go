package sim

import (
	"context"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/narwhal-router/narwhal/internal/testwait"
	"github.com/narwhal-router/narwhal/transport/kvevents"
)

// kvMirror is what a subscriber learns of an engine's prefix cache from its events alone.
type kvMirror struct {
	mu      sync.Mutex
	seqs    []uint64
	cached  map[uint64]bool
	stored  []kvevents.BlockStored
	removed int
	cleared int
	gaps    [][2]uint64
}

func (m *kvMirror) handle(seq uint64, b kvevents.Batch) {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.seqs = append(m.seqs, seq)
	for _, ev := range b.Events {
		switch e := ev.(type) {
		case kvevents.BlockStored:
			m.stored = append(m.stored, e)
			for _, h := range e.BlockHashes {
				m.cached[h] = true
			}
		case kvevents.BlockRemoved:
			m.removed += len(e.BlockHashes)
			for _, h := range e.BlockHashes {
				delete(m.cached, h)
			}
		case kvevents.AllBlocksCleared:
			m.cleared++
			clear(m.cached)
		}
	}
}

func (m *kvMirror) snapshot() (seqs []uint64, cached, removed, cleared int) {
	m.mu.Lock()
	defer m.mu.Unlock()
	return append([]uint64(nil), m.seqs...), len(m.cached), m.removed, m.cleared
}

// subscribe runs sub until the test ends (before the engine closes: cleanups run last
// first).
func subscribe(t *testing.T, sub *kvevents.Subscriber) {
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- sub.Run(ctx) }()
	t.Cleanup(func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("subscriber: %v", err)
		}
	})
}

// untilReceiving makes the engine publish (send(i) for i = 0, 1, …) until received() > 0:
// what is published before the subscription is up is lost to it live.
func untilReceiving(t *testing.T, send func(i int), received func() int) {
	t.Helper()
	i := 0
	testwait.UntilEvery(t, 10*time.Second, 5*time.Millisecond, func() bool {
		if received() > 0 {
			return true
		}
		send(i)
		i++
		return false
	}, func() string { return "the subscriber never received a batch" })
}

// A Go subscriber that joins late (it wants every batch from 0 on) gets the batches it
// missed from the replay socket, then the live ones, each once and in order; from the
// events alone it knows exactly which blocks the engine's prefix cache holds, through
// stores, evictions and a restart that empties it; BlockStored carries the blocks' hashes
// as the prefix cache computes them, their parent, their token ids and the block size.
func TestKVEventsMirrorThePrefixCache(t *testing.T) {
	e := startEngine(t, Options{MaxNumSeqs: 4, KVBlocks: 256, MaxModelLen: 1024, Tokens: 2,
		KVEvents: "tcp://127.0.0.1:0", KVEventsReplay: "tcp://127.0.0.1:0", KVEventsTopic: "kv@sim"})
	pub, replay := e.KVEvents()
	if !strings.HasPrefix(pub, "tcp://127.0.0.1:") || !strings.HasPrefix(replay, "tcp://127.0.0.1:") || e.Info().KVEvents != pub {
		t.Fatalf("endpoints %q %q, info %+v", pub, replay, e.Info())
	}
	prompt := func(tag string, n int) string {
		w := make([]string, n)
		for i := range w {
			w[i] = fmt.Sprintf("%s%d", tag, i)
		}
		return strings.Join(w, " ")
	}
	complete := func(p string) {
		t.Helper()
		if status, _, body := post(t, e.URL(), "/v1/completions", fmt.Sprintf(`{"prompt":%q,"max_tokens":2}`, p)); status != 200 {
			t.Fatalf("%d %s", status, body)
		}
	}
	// Batch 0, before anyone listens: a 64-word prompt, several blocks of 16 tokens.
	first := prompt("a", 64)
	complete(first)
	eventually(t, 10*time.Second, "the first batch", func() bool { return e.kvPub.published.Load() == 1 && e.kvPub.queued.Load() == 1 })

	m := &kvMirror{cached: map[uint64]bool{}}
	from := uint64(0)
	sub := &kvevents.Subscriber{Endpoint: pub, Replay: replay, Topic: "kv@", From: &from, Handle: m.handle,
		Gap: func(a, b uint64) { m.mu.Lock(); m.gaps = append(m.gaps, [2]uint64{a, b}); m.mu.Unlock() }}
	subscribe(t, sub)
	// The replay must fill everything before the first batch the subscription received.
	untilReceiving(t, func(i int) { complete(prompt(fmt.Sprintf("b%d_", i), 40)) },
		func() int { s, _, _, _ := m.snapshot(); return len(s) })
	// settled: every batch the engine made has been sent and delivered.
	settled := func() bool {
		s, _, _, _ := m.snapshot()
		p := e.kvPub.published.Load()
		return p == e.kvPub.queued.Load() && int64(len(s)) == p
	}
	eventually(t, 10*time.Second, "every batch delivered", settled)
	seqs, _, _, _ := m.snapshot()
	for i, s := range seqs {
		if s != uint64(i) {
			t.Fatalf("batches delivered %v: want 0, 1, 2, … once each", seqs)
		}
	}
	m.mu.Lock()
	st := m.stored[0]
	gaps := m.gaps
	m.mu.Unlock()
	firstIDs := e.tok.Encode(first)
	want := blockHashes(e.hasher, firstIDs, 16, extraKeys{})
	if fmt.Sprint(st.BlockHashes) != fmt.Sprint(want) || st.ParentBlockHash != nil || st.BlockSize != 16 ||
		fmt.Sprint(st.TokenIDs) != fmt.Sprint(firstIDs[:16*len(want)]) || st.Medium == nil || *st.Medium != "GPU" {
		t.Errorf("first BlockStored %+v, want the prompt's %d block hashes %v, no parent, its token ids", st, len(want), want)
	}
	if len(gaps) != 0 {
		t.Errorf("gaps reported %v: the replay had them all", gaps)
	}

	// A prompt that shares the first prompt's first two blocks stores the rest with the
	// second block as parent.
	shared := prompt("a", 32) + " " + prompt("c", 40)
	complete(shared)
	eventually(t, 10*time.Second, "the shared prompt's batch", settled)
	m.mu.Lock()
	last := m.stored[len(m.stored)-1]
	m.mu.Unlock()
	hs := blockHashes(e.hasher, e.tok.Encode(shared), 16, extraKeys{})
	k := 0
	for k < len(hs) && k < len(want) && hs[k] == want[k] {
		k++
	}
	if k < 2 || last.ParentBlockHash == nil || *last.ParentBlockHash != want[k-1] || fmt.Sprint(last.BlockHashes) != fmt.Sprint(hs[k:]) {
		t.Errorf("the shared prompt's BlockStored %+v: want blocks %v after parent %x", last, hs[k:], want[max(k-1, 0)])
	}

	// Fill the 256-block cache twice over: evictions, and the mirror still matches.
	for i := 0; i < 24; i++ {
		complete(prompt(fmt.Sprintf("d%d_", i), 120))
	}
	eventually(t, 10*time.Second, "the evictions' batches", settled)
	_, cached, removed, _ := m.snapshot()
	if removed == 0 || int64(cached) != e.Stats().KVBlocksCached {
		t.Errorf("after evictions the mirror holds %d blocks (%d removed), the engine %d", cached, removed, e.Stats().KVBlocksCached)
	}

	// A restart with nothing running empties the cache: AllBlocksCleared.
	e.Restart()
	eventually(t, 10*time.Second, "the restart's batch", func() bool { _, c, _, cl := m.snapshot(); return cl == 1 && c == 0 })
	if e.Stats().KVBlocksCached != 0 {
		t.Errorf("the engine still caches %d blocks", e.Stats().KVBlocksCached)
	}
}

// The replay socket answers like vLLM's: every buffered batch from the asked number on,
// then the end marker; a gap it cannot fill is reported.
func TestKVEventsReplayReportsWhatIsGone(t *testing.T) {
	e := startEngine(t, Options{MaxNumSeqs: 2, Tokens: 1, KVEvents: "tcp://127.0.0.1:0"}) // no replay socket
	pub, _ := e.KVEvents()
	for i := 0; i < 2; i++ {
		post(t, e.URL(), "/v1/completions", fmt.Sprintf(`{"prompt":"%s"}`, strings.Repeat(fmt.Sprintf("w%d ", i), 20)))
	}
	eventually(t, 10*time.Second, "two batches", func() bool { return e.kvPub.published.Load() == 2 })
	var mu sync.Mutex
	var got []uint64
	var gap [2]uint64
	from := uint64(0)
	sub := &kvevents.Subscriber{Endpoint: pub, From: &from,
		Handle: func(seq uint64, _ kvevents.Batch) { mu.Lock(); got = append(got, seq); mu.Unlock() },
		Gap:    func(a, b uint64) { mu.Lock(); gap = [2]uint64{a, b}; mu.Unlock() }}
	subscribe(t, sub)
	untilReceiving(t, func(i int) {
		post(t, e.URL(), "/v1/completions", fmt.Sprintf(`{"prompt":"%s"}`, strings.Repeat(fmt.Sprintf("x%d ", i), 20)))
	}, func() int { mu.Lock(); defer mu.Unlock(); return len(got) })
	mu.Lock()
	defer mu.Unlock()
	// Batch 0 was out before the subscription (a later one may still have been in the
	// socket's queue when it came up): everything before the first one received is lost.
	if got[0] == 0 || gap[0] != 0 || gap[1] != got[0]-1 {
		t.Errorf("first batch %d, gap reported %v: want batches 0…%d reported lost", got[0], gap, got[0]-1)
	}
}

func TestKVEventsNeedTheCapacityModel(t *testing.T) {
	if _, err := Start(Options{KVEvents: "tcp://127.0.0.1:0"}); err == nil || !strings.Contains(err.Error(), "capacity model") {
		t.Errorf("KV events without the capacity model: %v", err)
	}
	if _, err := Start(Options{MaxNumSeqs: 1, KVEventsReplay: "tcp://127.0.0.1:0"}); err == nil {
		t.Error("a replay socket without the PUB socket was accepted")
	}
}
