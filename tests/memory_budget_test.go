package tests

import (
	"bytes"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/narwhal-router/narwhal/config"
	"github.com/narwhal-router/narwhal/messages"
)

// The memory budget (server.max_buffered_bytes, issue 26, item 1), measured on a real `narwhal
// serve` process: its RSS is read from /proc. Before the budget, 100 concurrent 8 MiB requests
// held by a slow prefill took the router from 27 to 2257 MiB (2.8× each body) and 20 concurrent
// 60 MiB passthrough answers to 2103 MiB, and neither came back 100 s later.

// heldEngine is an engine that reads each request whole and then holds its answer until
// released: a slow prefill, or a passthrough answer the client has not read yet.
type heldEngine struct {
	srv     *httptest.Server
	arrived atomic.Int64 // requests read whole
	release chan struct{}
	once    sync.Once
}

func newHeldEngine(t *testing.T, answer func(w http.ResponseWriter, r *http.Request)) *heldEngine {
	e := &heldEngine{release: make(chan struct{})}
	e.srv = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Method != http.MethodPost {
			w.Header().Set("Content-Type", "application/json")
			w.Write([]byte(`{}`))
			return
		}
		io.Copy(io.Discard, r.Body)
		e.arrived.Add(1)
		select {
		case <-e.release:
		case <-r.Context().Done():
			return
		}
		answer(w, r)
	}))
	t.Cleanup(func() { e.free(); e.srv.Close() })
	return e
}

func (e *heldEngine) free() { e.once.Do(func() { close(e.release) }) }

const memoryBudget = 512 << 20

func memoryConfig(prefill, decode string) config.Config {
	cfg := config.Default()
	cfg.Log.AccessLog = false
	cfg.Disaggregation.Policy = config.DisaggAlways
	cfg.Request.DeadlineS = 120
	cfg.Recovery.EjectAfter = 1000
	// The held engines answer a POST only when the test frees them (and their prefill makes no
	// handoff): an inference probe could not admit them, so they join on their health check.
	cfg.Recovery.Readmission = config.ReadmissionHealth
	cfg.Server.MaxBufferedBytes = memoryBudget
	cfg.Engines = []config.Engine{
		{Name: "p0", URL: prefill, Role: config.RolePrefill, Models: []string{"m"}},
		{Name: "d0", URL: decode, Role: config.RoleDecode, Models: []string{"m"}},
	}
	return cfg
}

// burst sends n concurrent POSTs of body and returns the statuses and Retry-After headers; the
// responses' bodies are read and dropped.
func burst(t *testing.T, url string, n int, body func() io.Reader, wait <-chan struct{}) (statuses []int, retryAfter []string) {
	statuses, retryAfter = make([]int, n), make([]string, n)
	client := &http.Client{Timeout: 120 * time.Second}
	var wg sync.WaitGroup
	for i := range n {
		wg.Add(1)
		go func() {
			defer wg.Done()
			resp, err := client.Post(url, "application/json", body())
			if err != nil {
				t.Errorf("client %d: %v", i, err)
				return
			}
			statuses[i], retryAfter[i] = resp.StatusCode, resp.Header.Get("Retry-After")
			if resp.StatusCode == 200 && wait != nil {
				<-wait
			}
			io.Copy(io.Discard, resp.Body)
			resp.Body.Close()
		}()
	}
	wg.Wait()
	return statuses, retryAfter
}

// checkReturns waits until the router's RSS is back within 100 MiB of base, and says how long it
// took (at most a minute).
func checkReturns(t *testing.T, n *narwhalNode, base int64) time.Duration {
	t.Helper()
	start := time.Now()
	eventually(t, time.Minute, func() bool { return n.rss() < base+100<<20 }, func() string {
		return fmt.Sprintf("RSS %s a minute after the burst, %s before it", mib(n.rss()), mib(base))
	})
	return time.Since(start)
}

func (n *narwhalNode) engineStates() map[string]string {
	var es []messages.EngineState
	n.getJSON("/engines", &es)
	out := map[string]string{}
	for _, e := range es {
		out[e.Name] = e.State
	}
	return out
}

// 100 concurrent 8 MiB requests held by a slow prefill: those the budget has room for are held,
// the rest get 503 with Retry-After before their bodies are read; peak RSS stays under the
// budget plus 100 MiB, and returns once they end.
// slowPrefill is a producer that holds every prefill until freed, and a consumer that answers
// at once (no descriptor: the consumer decodes without a transfer).
func slowPrefill(t *testing.T) (prefill, decode *heldEngine) {
	prefill = newHeldEngine(t, func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		w.Write([]byte(`{"id":"cmpl-1","object":"text_completion","created":1,"model":"m","choices":[{"index":0,"text":"x","finish_reason":"length"}]}`))
	})
	decode = newHeldEngine(t, func(w http.ResponseWriter, r *http.Request) {
		finish(w, strings.ReplaceAll(hostileToken, "sim-model", "m")+"data: [DONE]\n\n")
	})
	decode.free()
	return prefill, decode
}

func TestMemoryBudgetHoldsBodiesHeldByASlowPrefill(t *testing.T) {
	prefill, decode := slowPrefill(t)
	n := routerProcess(t, memoryConfig(prefill.srv.URL, decode.srv.URL))
	base := n.rss()

	const clients, size = 100, 8<<20 - 1024
	body := []byte(`{"model":"m","max_tokens":2,"prompt":"` + strings.Repeat("a", size-len(`{"model":"m","max_tokens":2,"prompt":""}`)) + `"}`)
	done := make(chan struct{})
	var statuses []int
	var retryAfter []string
	go func() {
		defer close(done)
		statuses, retryAfter = burst(t, n.api+"/v1/completions", clients, func() io.Reader { return bytes.NewReader(body) }, nil)
	}()
	// Every request is either held by the prefill or already refused.
	refused := func() int {
		m := n.metrics()
		var v int
		fmt.Sscanf(m[strings.Index(m, `narwhal_buffer_refusals_total{reason="budget"}`)+len(`narwhal_buffer_refusals_total{reason="budget"}`):], "%d", &v)
		return v
	}
	eventually(t, 60*time.Second, func() bool {
		return strings.Contains(n.metrics(), "narwhal_buffer_refusals_total") && int(prefill.arrived.Load())+refused() >= clients
	}, func() string { return fmt.Sprintf("%d held, %d refused", prefill.arrived.Load(), refused()) })
	held := prefill.arrived.Load()
	heldRSS := n.rss()
	prefill.free()
	<-done
	peak := n.peakRSS()
	ok, busy := 0, 0
	for i, s := range statuses {
		switch {
		case s == 200:
			ok++
		case s == 503 && retryAfter[i] == "1":
			busy++
		default:
			t.Errorf("client %d: status %d, Retry-After %q", i, s, retryAfter[i])
		}
	}
	took := checkReturns(t, n, base)
	t.Logf("%d requests of 8 MiB: %d held at once (RSS %s, %.2f× each body above the %s at start), %d refused with 503; peak RSS %s for a %s budget; back to %s %s after the burst",
		clients, held, mib(heldRSS), float64(heldRSS-base)/float64(held*size), mib(base), busy, mib(peak), mib(memoryBudget), mib(n.rss()), took.Round(100*time.Millisecond))
	if max := int64(memoryBudget / size); held > max || ok != int(held) || busy != clients-int(held) || busy == 0 {
		t.Fatalf("%d held (at most %d fit), %d answered 200, %d refused", held, max, ok, busy)
	}
	if peak > memoryBudget+100<<20 {
		t.Fatalf("peak RSS %s, over the %s budget plus 100 MiB", mib(peak), mib(memoryBudget))
	}
	if cost := float64(heldRSS-base) / float64(held*size); cost > 1.5 {
		t.Fatalf("a held request costs %.2f× its body, want at most 1.5×", cost)
	}
	for name, state := range n.engineStates() {
		if state != "admitted" {
			t.Fatalf("the burst moved %s to %s", name, state)
		}
	}
}

// 20 concurrent 60 MiB passthrough answers: each is held once, those the budget has no room for
// fail with 503 router_overloaded (not counted against the engine); peak RSS stays under the
// budget plus 100 MiB and returns.
func TestMemoryBudgetHoldsPassthroughAnswers(t *testing.T) {
	const clients, size = 20, 60 << 20
	answer := []byte(`{"data":"` + strings.Repeat("x", size-len(`{"data":""}`)) + `"}`)
	var written atomic.Int64
	engine := newHeldEngine(t, func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		w.Header().Set("Content-Length", fmt.Sprint(len(answer))) // as vLLM's server sends it
		w.Write(answer)
		written.Add(1)
	})
	engine.free()
	n := routerProcess(t, memoryConfig(engine.srv.URL, engine.srv.URL))
	base := n.rss()
	readNow := make(chan struct{})
	done := make(chan struct{})
	var statuses []int
	go func() {
		defer close(done)
		statuses, _ = burst(t, n.api+"/v1/embeddings", clients, func() io.Reader { return strings.NewReader(`{"model":"m","input":"hi"}`) }, readNow)
	}()
	eventually(t, 60*time.Second, func() bool { return written.Load() >= clients }, func() string { return fmt.Sprintf("%d answers written", written.Load()) })
	// The answers the router holds are those its clients have not read yet.
	eventually(t, 10*time.Second, func() bool { return n.rss() > base+memoryBudget/2 }, func() string { return "RSS " + mib(n.rss()) })
	heldRSS := n.rss()
	close(readNow)
	<-done
	peak := n.peakRSS()
	ok, overloaded := 0, 0
	for _, s := range statuses {
		switch s {
		case 200:
			ok++
		case 503:
			overloaded++
		default:
			t.Errorf("status %d", s)
		}
	}
	took := checkReturns(t, n, base)
	t.Logf("%d answers of 60 MiB: %d relayed (RSS %s while held), %d refused with 503; peak RSS %s for a %s budget; back to %s %s after",
		clients, ok, mib(heldRSS), overloaded, mib(peak), mib(memoryBudget), mib(n.rss()), took.Round(100*time.Millisecond))
	if ok == 0 || ok > memoryBudget/size || overloaded != clients-ok {
		t.Fatalf("%d relayed, %d refused", ok, overloaded)
	}
	if peak > memoryBudget+100<<20 {
		t.Fatalf("peak RSS %s, over the %s budget plus 100 MiB", mib(peak), mib(memoryBudget))
	}
	if !strings.Contains(n.metrics(), `narwhal_buffer_refusals_total{reason="answer"} `+fmt.Sprint(overloaded)) {
		t.Fatalf("refusals not counted:\n%s", grepLines(n.metrics(), "buffer"))
	}
	for name, state := range n.engineStates() {
		if state != "admitted" {
			t.Fatalf("the answers moved %s to %s", name, state)
		}
	}
}

func grepLines(s, sub string) string {
	var out []string
	for _, l := range strings.Split(s, "\n") {
		if strings.Contains(l, sub) {
			out = append(out, l)
		}
	}
	return strings.Join(out, "\n")
}
