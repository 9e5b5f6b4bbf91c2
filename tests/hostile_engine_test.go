package tests

import (
	"bufio"
	"bytes"
	"context"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"net/url"
	"runtime"
	"runtime/debug"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/narwhal-router/narwhal/bench/sim"
	"github.com/narwhal-router/narwhal/config"
)

// hostileEngine is the suite's one engine that misbehaves on purpose, with its own small HTTP
// server (the simulator only misbehaves in the ways vLLM can): it floods, drips, sends giant,
// unterminated or non-JSON lines, ends streams without [DONE], leaks internal addresses in its
// errors and sends redirecting descriptors — whatever behaviour a test sets. The behaviour
// answers every POST (generation legs, probes and passthrough requests: all the router POSTs);
// every other request, and every request while no behaviour is set, goes to the fallback: {},
// so the router's housekeeping requests are harmless, or, in front of a simulated engine
// (hostileFront), that engine, so health checks and model lists are real.
type hostileEngine struct {
	srv *httptest.Server
	// serve runs one POST; it returns whether the router hung up on it.
	serve atomic.Pointer[func(w http.ResponseWriter, r *http.Request) (abortedByRouter bool)]
	// aborted counts legs the router cut off; legs counts every POST the behaviour answered.
	aborted, legs atomic.Int64
	running       sync.WaitGroup
}

// newHostileEngine starts a hostile engine that answers what it does not misbehave on with {}.
func newHostileEngine(t *testing.T) *hostileEngine {
	return startHostile(t, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		w.Write([]byte(`{}`))
	}))
}

// hostileFront starts a hostile engine in front of the (simulated) engine at upstream, which
// answers everything the hostile one does not misbehave on.
func hostileFront(t *testing.T, upstream string) *hostileEngine {
	t.Helper()
	u, err := url.Parse(upstream)
	if err != nil {
		t.Fatal(err)
	}
	return startHostile(t, bufferingProxy(u, http.DefaultTransport))
}

func startHostile(t *testing.T, fallback http.Handler) *hostileEngine {
	e := &hostileEngine{}
	e.srv = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		fn := e.serve.Load()
		if fn == nil || r.Method != http.MethodPost {
			fallback.ServeHTTP(w, r)
			return
		}
		e.running.Add(1)
		defer e.running.Done()
		e.legs.Add(1)
		_, _ = io.Copy(io.Discard, r.Body) // the whole request first, as an engine reads it
		if (*fn)(w, r) {
			e.aborted.Add(1)
		}
	}))
	t.Cleanup(e.srv.Close)
	return e
}

func (e *hostileEngine) set(fn func(w http.ResponseWriter, r *http.Request) bool) {
	if fn == nil {
		e.serve.Store(nil)
		return
	}
	e.serve.Store(&fn)
}

// hostileInFront puts a hostile engine with behaviour serve in front of every engine of the
// fleet in role.
func hostileInFront(t *testing.T, role config.Role, serve func(w http.ResponseWriter, r *http.Request) bool) func(*config.Config) {
	return func(c *config.Config) {
		for i, e := range c.Engines {
			if e.Role == role {
				h := hostileFront(t, e.URL)
				h.set(serve)
				c.Engines[i].URL = h.srv.URL
			}
		}
	}
}

// sse starts an event stream.
func sse(w http.ResponseWriter) {
	w.Header().Set("Content-Type", "text/event-stream")
	w.WriteHeader(200)
	w.(http.Flusher).Flush()
}

// flood writes chunk until the router hangs up (true) or ten seconds pass (false).
func flood(w http.ResponseWriter, r *http.Request, chunk []byte) bool {
	sse(w)
	stop := time.Now().Add(10 * time.Second)
	for time.Now().Before(stop) {
		if _, err := w.Write(chunk); err != nil || r.Context().Err() != nil {
			return true
		}
	}
	return false
}

// drip writes b one byte at a time, every interval, after prefix, until the router hangs up.
func drip(w http.ResponseWriter, r *http.Request, prefix string, b []byte, interval time.Duration) bool {
	sse(w)
	w.Write([]byte(prefix))
	w.(http.Flusher).Flush()
	stop := time.Now().Add(10 * time.Second)
	for i := 0; time.Now().Before(stop); i++ {
		select {
		case <-r.Context().Done():
			return true
		case <-time.After(interval):
		}
		if _, err := w.Write(b[i%len(b) : i%len(b)+1]); err != nil {
			return true
		}
		w.(http.Flusher).Flush()
	}
	return false
}

// finish writes the whole stream and returns; the router may or may not have read it all.
func finish(w http.ResponseWriter, stream string) bool {
	sse(w)
	_, err := w.Write([]byte(stream))
	w.(http.Flusher).Flush()
	return err != nil
}

const hostileToken = "data: {\"id\":\"cmpl-h\",\"object\":\"text_completion\",\"created\":1,\"model\":\"sim-model\",\"choices\":[{\"index\":0,\"text\":\" tok\",\"logprobs\":null,\"finish_reason\":null}]}\n\n"

// heapWatch samples the router's heap (this process) until stopped and reports the peak above
// the baseline.
func heapWatch() (stop func() (peakAbove uint64)) {
	// HeapAlloc counts garbage not yet collected, and the collector lets it grow to GOGC% of
	// the live heap before it runs: with the default 100 the figure swings by tens of MiB with
	// GC timing alone. Collecting at 10% while watching makes the peak what the process holds.
	gcPercent := debug.SetGCPercent(10)
	runtime.GC()
	var ms runtime.MemStats
	runtime.ReadMemStats(&ms)
	base := ms.HeapAlloc
	var peak atomic.Uint64
	done := make(chan struct{})
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		t := time.NewTicker(10 * time.Millisecond)
		defer t.Stop()
		for {
			var ms runtime.MemStats
			runtime.ReadMemStats(&ms)
			if ms.HeapAlloc > peak.Load() {
				peak.Store(ms.HeapAlloc)
			}
			select {
			case <-done:
				return
			case <-t.C:
			}
		}
	}()
	return func() uint64 {
		close(done)
		wg.Wait()
		debug.SetGCPercent(gcPercent)
		if p := peak.Load(); p > base {
			return p - base
		}
		return 0
	}
}

// sendDroppingComments is send for a client that reads as it goes and keeps no SSE comment
// lines: the heap this process measures is then the router's, not a test client's copy of a
// flood.
func (h *harness) sendDroppingComments(path, body string) result {
	h.t.Helper()
	id := newRequestID(h.t)
	req, err := http.NewRequest(http.MethodPost, h.base+path, strings.NewReader(body))
	if err != nil {
		h.t.Fatal(err)
	}
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("X-Request-Id", id)
	resp, err := h.client.Do(req)
	if err != nil {
		h.t.Fatal(err)
	}
	defer resp.Body.Close()
	var kept, ev []byte
	onlyComments := true
	br := bufio.NewReader(resp.Body)
	for {
		line, err := br.ReadBytes('\n')
		switch {
		case len(line) == 1 && line[0] == '\n': // the event's end (or a stray blank line)
			if !onlyComments {
				kept = append(append(kept, ev...), line...)
			}
			ev, onlyComments = ev[:0], true
		case len(line) > 0:
			onlyComments = onlyComments && line[0] == ':'
			if !onlyComments {
				ev = append(ev, line...)
			}
		}
		if err != nil {
			break
		}
	}
	kept = append(kept, ev...)
	return result{id: id, status: resp.StatusCode, header: resp.Header, body: kept}
}

// TestHostileDecodeEngine puts a hostile engine in the decode role behind a simulated producer:
// whatever it sends, the client gets one well-formed outcome, the router's heap stays bounded,
// the engine leg is cut off, no reservation is left and no goroutine outlives the request.
func TestHostileDecodeEngine(t *testing.T) {
	comments := bytes.Repeat([]byte(": keep-alive\n\n"), 4096)
	emptyDeltas := bytes.Repeat([]byte("data: {\"choices\":[{\"index\":0,\"text\":\"\"}]}\n\n"), 1024)
	notJSON := bytes.Repeat([]byte("data: this is not json\n\n"), 2048)
	giant := append([]byte("data: "), bytes.Repeat([]byte("x"), 64<<10)...)
	cases := []struct {
		name   string
		stream bool
		serve  func(w http.ResponseWriter, r *http.Request) bool
		status int    // client status
		code   string // error code (the envelope's, or the terminal event's after commit)
		// committed: a 200 stream that ends with a terminal error event (code) or, with code "",
		// with [DONE].
		committed bool
		// cutOff: the engine would go on forever; the router must hang up on it.
		cutOff bool
		// bySize: the case is ended by a size bound alone, so it runs with a first-token timeout
		// no machine reaches (10 s): on a loaded one, reading 4 MiB may take longer than the 0.5 s
		// the timeout cases use, and the timeout must not decide it.
		bySize bool
	}{
		{name: "comment flood before the first token", serve: func(w http.ResponseWriter, r *http.Request) bool { return flood(w, r, comments) },
			status: 504, code: "first_token_timeout", cutOff: true},
		{name: "empty delta flood before the first token", serve: func(w http.ResponseWriter, r *http.Request) bool { return flood(w, r, emptyDeltas) },
			status: 502, code: "held_overflow", cutOff: true},
		{name: "non-JSON data lines", serve: func(w http.ResponseWriter, r *http.Request) bool { return flood(w, r, notJSON) },
			status: 502, code: "held_overflow", cutOff: true},
		{name: "a giant line that never ends", serve: func(w http.ResponseWriter, r *http.Request) bool {
			sse(w)
			w.Write(giant[:6])
			for r.Context().Err() == nil {
				if _, err := w.Write(giant[6:]); err != nil {
					return true
				}
			}
			return true
		}, status: 502, code: "bad_response", cutOff: true, bySize: true},
		{name: "an unterminated line, then a close", serve: func(w http.ResponseWriter, r *http.Request) bool {
			return finish(w, "data: {\"choices\":[{\"index\":0,\"text\":\" tok")
		}, status: 502, code: "closed_early"},
		{name: "bytes dripped before the first token", serve: func(w http.ResponseWriter, r *http.Request) bool {
			return drip(w, r, "", []byte(hostileToken), 20*time.Millisecond)
		}, status: 504, code: "first_token_timeout", cutOff: true},
		{name: "bytes dripped after the first token", stream: true, serve: func(w http.ResponseWriter, r *http.Request) bool {
			return drip(w, r, hostileToken, []byte(hostileToken), 20*time.Millisecond)
		}, status: 200, committed: true, code: "silence", cutOff: true},
		{name: "invalid UTF-8 after the first token", stream: true, serve: func(w http.ResponseWriter, r *http.Request) bool {
			return finish(w, hostileToken+"data: {\"choices\":[{\"index\":0,\"text\":\"\xff\xfe\xfd\"}]}\n\n"+"data: [DONE]\n\n")
		}, status: 200, committed: true},
		// server.max_response_bytes cuts it off; by size alone the router cannot tell an endless
		// answer from a long one, so it is the operator's bound (response_too_large), not a fault.
		{name: "tokens without end for a non-streaming client", serve: func(w http.ResponseWriter, r *http.Request) bool {
			return flood(w, r, bytes.Repeat([]byte(hostileToken), 256))
		}, status: 502, code: "response_too_large", cutOff: true, bySize: true},
		// Asked for Accept-Encoding: identity, it compresses anyway: relaying the bytes without
		// their encoding would hand the client garbage (issue 26, item 7).
		{name: "a gzip-encoded stream", stream: true, serve: func(w http.ResponseWriter, r *http.Request) bool {
			if r.Header.Get("Accept-Encoding") != "identity" {
				http.Error(w, "not asked for identity", http.StatusTeapot)
				return false
			}
			w.Header().Set("Content-Encoding", "gzip")
			return finish(w, "\x1f\x8b\x08\x00\x00\x00\x00\x00compressed")
		}, status: 502, code: "bad_response"},
		{name: "comments flooded after the first token", stream: true, serve: func(w http.ResponseWriter, r *http.Request) bool {
			sse(w)
			w.Write([]byte(hostileToken))
			for r.Context().Err() == nil {
				if _, err := w.Write(comments); err != nil {
					return true
				}
			}
			return true
		}, status: 200, committed: true, code: "deadline_exceeded", cutOff: true},
	}
	hostile := newHostileEngine(t)
	router := func(firstToken, deadlineS float64) *harness {
		h := start(t, setup{admit: true, prefill: 1, decode: 1, engine: sim.Options{Tokens: 2}, config: configs(
			timeouts(2, firstToken, 0.3), deadline(deadlineS),
			func(c *config.Config) {
				c.Recovery.EjectAfter = 1000
				c.Engine.IdleConnTimeoutS = 0.05 // pooled engine connections (and their servers' goroutines) go soon
				c.Server.MaxResponseBytes = 1 << 20
				for i := range c.Engines {
					if c.Engines[i].Role == config.RoleDecode {
						c.Engines[i].URL = hostile.srv.URL
					}
				}
			})})
		// A first request opens the keep-alive connections every later one reuses, so that the
		// goroutine count before each case is the steady state.
		hostile.set(func(w http.ResponseWriter, r *http.Request) bool { return finish(w, hostileToken+"data: [DONE]\n\n") })
		if r := h.send("/v1/completions", completion("hi", false)); r.status != 200 {
			t.Fatalf("warm-up: %d %s", r.status, r.body)
		}
		return h
	}
	timed, sized := router(0.5, 1.5), router(10, 20)
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			h := timed
			if tc.bySize {
				h = sized
			}
			hostile.set(tc.serve)
			abortedBefore := hostile.aborted.Load()
			goroutines := runtime.NumGoroutine()
			peak := heapWatch()
			r := h.sendDroppingComments("/v1/completions", completion("hi", tc.stream))
			above := peak()
			t.Logf("peak heap %.1f MiB above the baseline; client: %d", float64(above)/(1<<20), r.status)

			if r.status != tc.status {
				t.Fatalf("status %d, want %d: %.300s", r.status, tc.status, r.body)
			}
			if tc.committed {
				events := sseEvents(t, r.body)
				last := events[len(events)-1]
				switch {
				case tc.code == "" && last != "[DONE]":
					t.Fatalf("stream ended with %q, want [DONE]", last)
				case tc.code != "" && !strings.Contains(last, `"code":"`+tc.code+`"`):
					t.Fatalf("stream ended with %q, want a terminal %s error event", last, tc.code)
				}
				if n := strings.Count(string(r.body), `data: {"error":`); tc.code != "" && n != 1 {
					t.Fatalf("%d error events, want one", n)
				}
			} else if e := envelope(t, r.body); e.code() != tc.code {
				t.Fatalf("error code %q, want %q: %s", e.code(), tc.code, r.body)
			}
			if above > 48<<20 {
				t.Fatalf("router heap grew %d MiB for one request", above>>20)
			}
			if tc.cutOff {
				eventually(t, 5*time.Second, func() bool { return hostile.aborted.Load() > abortedBefore },
					func() string { return "the router never hung up on the hostile engine" })
			}
			h.assertNoReservations()
			eventually(t, 5*time.Second, func() bool { return runtime.NumGoroutine() <= goroutines }, func() string {
				return fmt.Sprintf("%d goroutines, %d before the request", runtime.NumGoroutine(), goroutines)
			})
		})
	}
	hostile.set(nil)
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	done := make(chan struct{})
	go func() { hostile.running.Wait(); close(done) }()
	select {
	case <-done:
	case <-ctx.Done():
		t.Fatal("hostile engine handlers still running")
	}
}

// TestHostileProducerCannotRedirectConsumers puts a hostile engine in the prefill role, its KV
// endpoint unpinned (the default): descriptors that point the consumer anywhere but the
// producer's own host, or that flip the consumer's protocol, are refused (502
// invalid_descriptor), and the consumer never receives a decode leg.
func TestHostileProducerCannotRedirectConsumers(t *testing.T) {
	hostile := newHostileEngine(t)
	h := start(t, setup{admit: true, prefill: 1, decode: 1, engine: sim.Options{Tokens: 2}, config: configs(
		func(c *config.Config) {
			c.Recovery.EjectAfter = 1000
			for i := range c.Engines {
				if c.Engines[i].Role == config.RolePrefill {
					c.Engines[i].URL = hostile.srv.URL
					c.Engines[i].KV.Endpoint = "" // not pinned
					c.Engines[i].KV.EngineID = ""
				}
			}
		})})
	_, adminPort, _ := strings.Cut(strings.TrimPrefix(h.admin, "http://"), ":")
	descriptor := func(host string, port any, extra string) string {
		return fmt.Sprintf(`{"do_remote_prefill":true,"do_remote_decode":false,"remote_block_ids":[0,1],"remote_engine_id":"hostile","remote_host":%q,"remote_port":%v%s}`,
			host, port, extra)
	}
	cases := map[string]string{
		"cloud metadata": descriptor("169.254.169.254", 80, ""),
		"the admin port on another loopback address": descriptor("127.0.0.2", adminPort, ""),
		"a host with a path":                         descriptor("127.0.0.1/debug", adminPort, ""),
		"another host":                               descriptor("10.1.2.3", 5600, ""),
		// Its own host (the router's too, here) only on the NIXL ports (issue 26, item 6).
		"its own host, the router's admin port":  descriptor("127.0.0.1", adminPort, ""),
		"its own host, the router's client port": descriptor("127.0.0.1", strings.TrimPrefix(h.base, "http://127.0.0.1:"), ""),
		"its own host, another local service":    descriptor("127.0.0.1", 6379, ""),
		"a protocol flip":                        descriptor("127.0.0.1", 5600, `,"do_remote_decode":true`),
	}
	for name, desc := range cases {
		t.Run(name, func(t *testing.T) {
			hostile.set(func(w http.ResponseWriter, r *http.Request) bool {
				w.Header().Set("Content-Type", "application/json")
				fmt.Fprintf(w, `{"id":"cmpl-h","object":"text_completion","created":1,"model":"sim-model","choices":[{"index":0,"text":"x","finish_reason":"length"}],"kv_transfer_params":%s}`, desc)
				return false
			})
			r := h.send("/v1/completions", completion("hi", false))
			expectError(t, r, 502, "invalid_descriptor", "the producer's handoff descriptor failed validation")
			if n := len(h.legs("decode")); n != 0 {
				t.Fatalf("the consumer received %d decode legs", n)
			}
		})
	}
}

// TestOversizedPassthroughAnswerIsAClearError: a passthrough answer is read whole before the
// client gets it, so server.max_response_bytes bounds it. An engine answering /v1/embeddings with
// more gets the client a 502 response_too_large naming the key and its value; one within the
// bound reaches the client byte for byte, and nothing stays reserved either way.
func TestOversizedPassthroughAnswerIsAClearError(t *testing.T) {
	const limit = 64 << 10
	var size atomic.Int64
	answer := func(w http.ResponseWriter, r *http.Request) bool {
		if !strings.HasSuffix(r.URL.Path, "/embeddings") {
			return finish(w, hostileToken+"data: [DONE]\n\n")
		}
		// A JSON object of exactly size bytes: {"data":"xxx…"}.
		w.Header().Set("Content-Type", "application/json")
		_, err := fmt.Fprintf(w, `{"data":"%s"}`, strings.Repeat("x", int(size.Load())-len(`{"data":""}`)))
		return err != nil
	}
	h := start(t, setup{prefill: 1, decode: 1, config: configs(retries(1),
		func(c *config.Config) {
			c.Recovery.EjectAfter = 1000
			c.Server.MaxResponseBytes = limit
		},
		hostileInFront(t, config.RoleDecode, answer))})
	embeddings := `{"model":"sim-model","input":"hi"}`

	size.Store(limit)
	r := h.send("/v1/embeddings", embeddings)
	if r.status != 200 || len(r.body) != limit || !bytes.HasPrefix(r.body, []byte(`{"data":"xxx`)) {
		t.Fatalf("an answer of exactly server.max_response_bytes: %d, %d bytes: %.100s", r.status, len(r.body), r.body)
	}
	h.assertNoReservations()

	size.Store(limit + 1)
	r = h.send("/v1/embeddings", embeddings)
	if r.status != 502 {
		t.Fatalf("an answer one byte over server.max_response_bytes: %d, %d bytes: %.100s", r.status, len(r.body), r.body)
	}
	expectError(t, r, 502, "response_too_large", "the engine's answer is larger than server.max_response_bytes (65536 bytes)")
	h.expectAccess(r.id, 502, 1, "response_too_large")
	h.assertNoReservations()
}
