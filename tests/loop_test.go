package tests

import (
	"bytes"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"runtime"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/narwhal-router/narwhal/config"
	"github.com/narwhal-router/narwhal/internal/testwait"
)

// POST /engines refuses an engine that would send the router's traffic back to itself: its URL
// at one of the router's listeners (under every name of this host), kv.allowed_ports covering
// one, a pin at one; and a URL with credentials, never repeating them.
func TestAdminRefusesEnginesThatLoopBack(t *testing.T) {
	h := start(t, setup{})
	_, clientPort, _ := net.SplitHostPort(h.srv.Addr())
	_, adminPort, _ := net.SplitHostPort(h.srv.AdminAddr())
	for _, tc := range []struct{ name, body, want string }{
		{"client port on loopback", `{"name": "self", "url": "http://127.0.0.1:` + clientPort + `", "role": "both"}`, "own listener"},
		{"client port as localhost", `{"name": "self", "url": "http://localhost:` + clientPort + `", "role": "both"}`, "own listener"},
		{"client port unspecified", `{"name": "self", "url": "http://0.0.0.0:` + clientPort + `", "role": "both"}`, "own listener"},
		{"admin port", `{"name": "self", "url": "http://127.0.0.1:` + adminPort + `", "role": "decode"}`, "own listener"},
		{"kv pin at the admin port", `{"name": "p9", "url": "http://127.0.0.1:9", "role": "prefill", "kv": {"endpoint": "127.0.0.1:` + adminPort + `"}}`, "kv.endpoint"},
		{"allowed ports cover the router's", `{"name": "p9", "url": "http://10.0.0.9:8000", "role": "prefill", "kv": {"allowed_ports": ["1-65535"]}}`, "kv.allowed_ports"},
		{"credentials in the url", `{"name": "p9", "url": "http://admin:s3cretpw@10.0.0.9:8000", "role": "prefill"}`, "credentials"},
		{"10 KB host", `{"name": "p9", "url": "http://` + strings.Repeat("a", 10<<10) + `:8000", "role": "prefill"}`, "at most 253"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			code, body := h.adminSend("POST", "/engines", tc.body)
			if code != http.StatusBadRequest || !strings.Contains(string(body), tc.want) {
				t.Fatalf("POST /engines: %d %s; want 400 naming %s", code, body, tc.want)
			}
			if bytes.Contains(body, []byte("s3cretpw")) || len(body) > 2048 {
				t.Fatalf("the refusal repeats the credentials or the whole value (%d bytes)", len(body))
			}
		})
	}
	for _, e := range h.engines() {
		if e.Name == "self" || e.Name == "p9" {
			t.Fatalf("refused engine %s is in the fleet", e.Name)
		}
	}
}

// A request the router sends an engine that forwards it back to the router (a hostile or
// misconfigured engine: a proxy to the router) is refused at its first return with 508 Loop
// Detected: the client gets an error, the loop turns once per attempt, and no goroutine or
// connection piles up.
func TestRequestLoopingBackIsRefused(t *testing.T) {
	var router atomic.Value // the router's base URL, once it listens
	var forwarded, refused atomic.Int64
	loop := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		switch r.URL.Path {
		case "/health":
			return
		case "/v1/models":
			io.WriteString(w, `{"object": "list", "data": [{"id": "m", "object": "model", "max_model_len": 4096}]}`)
			return
		}
		base, _ := router.Load().(string)
		if base == "" {
			http.Error(w, "the router does not listen yet", http.StatusServiceUnavailable)
			return
		}
		forwarded.Add(1)
		req, _ := http.NewRequest(r.Method, base+r.URL.Path, r.Body)
		req.Header = r.Header.Clone() // a proxy keeps the headers
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			http.Error(w, err.Error(), http.StatusBadGateway)
			return
		}
		defer resp.Body.Close()
		if resp.StatusCode == http.StatusLoopDetected {
			refused.Add(1)
		}
		w.WriteHeader(resp.StatusCode)
		io.Copy(w, resp.Body)
	}))
	defer loop.Close()
	h := start(t, setup{both: 1, admit: true, noWait: true, config: func(c *config.Config) {
		c.Engines = []config.Engine{{Name: "loop", URL: loop.URL, Role: config.RoleBoth, Models: []string{"m"}}}
	}})
	router.Store(h.base)
	h.waitJoined(true)
	before := runtime.NumGoroutine()

	resp, body := h.post("/v1/completions", `{"model": "m", "prompt": "hi", "max_tokens": 4}`)
	if resp.StatusCode < 500 {
		t.Fatalf("looped request answered %d %s; want an engine error", resp.StatusCode, body)
	}
	if refused.Load() == 0 || refused.Load() != forwarded.Load() || forwarded.Load() > 10 {
		t.Fatalf("forwarded %d, refused with 508 %d: the loop was not cut at its first turn", forwarded.Load(), refused.Load())
	}
	testwait.Until(t, 5*time.Second, func() bool { return runtime.NumGoroutine() <= before+10 },
		func() string {
			return fmt.Sprintf("goroutines %d, %d before the request", runtime.NumGoroutine(), before)
		})
}
