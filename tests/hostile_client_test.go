package tests

import (
	"bufio"
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/narwhal-router/narwhal/bench/sim"
	"github.com/narwhal-router/narwhal/config"
)

// The hostile-client suite: clients that misbehave on purpose against a real `narwhal serve`
// process (the binary `make build` produces), each case asserting what the client gets and what
// the router keeps — its log, its memory, its engines. tests/hostile_engine_test.go is the
// engines' side, tests/cluster_rogue_test.go a rogue cluster node's.

const clientKey = "sk-test-0123456789SECRETabcdef"

// rawExchange writes req on a fresh connection and returns the status line of the answer ("" if
// the router closed without one).
func rawExchange(t *testing.T, addr, req string) string {
	t.Helper()
	c, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	c.SetDeadline(time.Now().Add(2 * time.Second))
	if _, err := io.WriteString(c, req); err != nil {
		return ""
	}
	line, _ := bufio.NewReader(c).ReadString('\n')
	return strings.TrimSpace(line)
}

// The malformed shapes fasthttp's default logger printed whole, API key included (issue 26,
// item 2), and a few more. Each carries the key; none may reach any output stream of the
// process, and each parse error is one JSON line with the peer and a reason, rate limited.
func TestMalformedRequestsNeverLogTheKey(t *testing.T) {
	fleet, err := sim.StartFleet(sim.FleetOptions{Prefill: 1, Decode: 1, Engine: sim.Options{Tokens: 2, Models: []string{"sim-model"}}})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { fleet.Close() })
	cfg := config.Default()
	cfg.Engines = fleetEngines(fleet)
	cfg.Server.APIKeys = []string{clientKey}
	cfg.Log.Level = "debug" // everything the process would ever say
	n := routerProcess(t, cfg)
	addr := strings.TrimPrefix(n.api, "http://")
	auth := "Authorization: Bearer " + clientKey + "\r\n"
	body := `{"model":"sim-model","prompt":"hi","max_tokens":2}`
	shapes := map[string]string{
		"NUL in a header":          "POST /v1/completions HTTP/1.1\r\nHost: x\r\n" + auth + "X-A: a\x00b\r\nContent-Length: 2\r\n\r\n{}",
		"header without a colon":   "POST /v1/completions HTTP/1.1\r\nHost: x\r\n" + auth + "NoColonHere\r\nContent-Length: 2\r\n\r\n{}",
		"bad Content-Length":       "POST /v1/completions HTTP/1.1\r\nHost: x\r\n" + auth + "Content-Length: 12abc\r\n\r\n{}",
		"space before the colon":   "POST /v1/completions HTTP/1.1\r\nHost: x\r\n" + auth + "Content-Length : 2\r\n\r\n{}",
		"bad request line":         "POST  /v1/completions\r\n" + auth + "Host: x\r\n\r\n",
		"no Host":                  "POST /v1/completions HTTP/1.1\r\n" + auth + "Content-Length: 2\r\n\r\n{}",
		"LF only":                  "POST /v1/completions HTTP/1.1\nHost: x\n" + auth[:len(auth)-2] + "\nContent-Length: 2\n\n{}",
		"two Content-Lengths":      "POST /v1/completions HTTP/1.1\r\nHost: x\r\n" + auth + "Content-Length: 2\r\nContent-Length: 3\r\n\r\n{}",
		"chunked and length":       "POST /v1/completions HTTP/1.1\r\nHost: x\r\n" + auth + "Transfer-Encoding: chunked\r\nContent-Length: 2\r\n\r\nzz\r\n",
		"bad chunk size":           "POST /v1/completions HTTP/1.1\r\nHost: x\r\n" + auth + "Transfer-Encoding: chunked\r\n\r\nzz\r\n{}\r\n0\r\n\r\n",
		"header line too large":    "POST /v1/completions HTTP/1.1\r\nHost: x\r\n" + auth + "X-Big: " + strings.Repeat("k", 20<<10) + "\r\n\r\n",
		"key in the request line":  "POST /v1/completions?key=" + clientKey + " HTTP/1.1 junk\r\nHost: x\r\n\r\n",
		"a well-formed request ok": fmt.Sprintf("POST /v1/completions HTTP/1.1\r\nHost: x\r\n%sContent-Type: application/json\r\nContent-Length: %d\r\nConnection: close\r\n\r\n%s", auth, len(body), body),
	}
	rss, goroutines := n.rss(), n.goroutines()
	for name, req := range shapes {
		status := rawExchange(t, addr, req)
		t.Logf("%s: %q", name, status)
		switch {
		case name == "a well-formed request ok":
			if !strings.HasPrefix(status, "HTTP/1.1 200") {
				t.Errorf("%s: %q", name, status)
			}
		case name == "header line too large":
			if !strings.HasPrefix(status, "HTTP/1.1 431") {
				t.Errorf("%s: %q, want 431", name, status)
			}
		case status != "" && !strings.HasPrefix(status, "HTTP/1.1 400"):
			t.Errorf("%s: %q, want 400 or a closed connection", name, status)
		}
	}
	// A flood of malformed requests is logged a bounded number of times.
	for range 60 {
		rawExchange(t, addr, shapes["header without a colon"])
	}
	eventually(t, 5*time.Second, func() bool { return bytes.Contains(n.log.Bytes(), []byte("client connection failed")) },
		func() string { return "no connection error logged:\n" + string(n.log.Bytes()) })
	eventually(t, 10*time.Second, func() bool { return n.goroutines() <= goroutines+2 },
		func() string {
			return fmt.Sprintf("goroutines %d → %d after the malformed requests", goroutines, n.goroutines())
		})
	if grown := n.rss() - rss; grown > 20<<20 {
		t.Fatalf("RSS grew %s over the malformed requests", mib(grown))
	}
	for name, state := range n.engineStates() {
		if state != "admitted" {
			t.Fatalf("malformed requests moved %s to %s", name, state)
		}
	}
	n.stop()
	streams := map[string][]byte{"stderr": n.log.Bytes(), "stdout": n.out.Bytes()}
	for name, b := range streams {
		for _, secret := range []string{clientKey, "SECRETabcdef", "sk-test"} {
			if bytes.Contains(b, []byte(secret)) {
				t.Fatalf("%s holds the API key (%q):\n%s", name, secret, b)
			}
		}
	}
	lines := 0
	for _, l := range bytes.Split(bytes.TrimSpace(n.log.Bytes()), []byte("\n")) {
		var rec map[string]any
		if err := json.Unmarshal(l, &rec); err != nil {
			t.Fatalf("stderr line is not JSON: %q", l)
		}
		if rec["msg"] != "client connection failed" {
			continue
		}
		lines++
		t.Logf("%s", l)
		if peer, _ := rec["peer"].(string); !strings.HasPrefix(peer, "127.0.0.1:") || rec["reason"] == "" {
			t.Fatalf("connection error line without peer or reason: %s", l)
		}
		if len(l) > 400 {
			t.Fatalf("connection error line of %d bytes: %s", len(l), l)
		}
	}
	if lines == 0 || lines > 10 {
		t.Fatalf("%d connection error lines for %d malformed requests, want 1..10 (rate limited)", lines, 60+len(shapes)-1)
	}
}

// The memory budget answers before the body is read: a request whose Content-Length does not
// fit what is left gets 503 with Retry-After, and one larger than the whole budget 413, once
// its headers and the first 8 KiB of its body are in (fasthttp reads that much before any
// handler runs) — the client has not sent the rest (issue 26, item 1).
func TestBudgetAnswersBeforeTheBodyIsRead(t *testing.T) {
	prefill, decode := slowPrefill(t)
	cfg := memoryConfig(prefill.srv.URL, decode.srv.URL)
	cfg.Server.MaxBufferedBytes, cfg.Server.MaxBodyBytes = 64<<20, 128<<20
	n := routerProcess(t, cfg)
	addr := strings.TrimPrefix(n.api, "http://")
	// One request of 40 MiB, held by the slow prefill, takes most of the budget.
	held := make(chan int, 1)
	go func() {
		body := `{"model":"m","max_tokens":2,"prompt":"` + strings.Repeat("a", 40<<20) + `"}`
		resp, err := http.Post(n.api+"/v1/completions", "application/json", strings.NewReader(body))
		if err != nil {
			held <- 0
			return
		}
		io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
		held <- resp.StatusCode
	}()
	eventually(t, 20*time.Second, func() bool { return prefill.arrived.Load() == 1 }, func() string { return "the first request never reached the prefill" })
	headersOnly := func(length int) (string, string) { // and the first 8 KiB of the body
		c, err := net.Dial("tcp", addr)
		if err != nil {
			t.Fatal(err)
		}
		defer c.Close()
		c.SetDeadline(time.Now().Add(5 * time.Second))
		fmt.Fprintf(c, "POST /v1/completions HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\nContent-Length: %d\r\n\r\n%s", length,
			strings.Repeat(" ", min(length, 8<<10)))
		resp, err := http.ReadResponse(bufio.NewReader(c), nil)
		if err != nil {
			t.Fatalf("no answer to headers alone (Content-Length %d): %v", length, err)
		}
		b, _ := io.ReadAll(resp.Body)
		return resp.Status + " Retry-After=" + resp.Header.Get("Retry-After"), string(b)
	}
	if status, body := headersOnly(40 << 20); !strings.HasPrefix(status, "503") || !strings.Contains(status, "Retry-After=1") || !strings.Contains(body, "buffer_full") {
		t.Fatalf("a body that does not fit what is left: %s %s", status, body)
	}
	if status, body := headersOnly(100 << 20); !strings.HasPrefix(status, "413") || !strings.Contains(body, "server.max_buffered_bytes") {
		t.Fatalf("a body larger than the whole budget: %s %s", status, body)
	}
	prefill.free()
	if s := <-held; s != 200 {
		t.Fatalf("the held request: %d", s)
	}
	// Its reservation given back, the same 40 MiB fits again.
	resp, err := http.Post(n.api+"/v1/completions", "application/json",
		strings.NewReader(`{"model":"m","max_tokens":2,"prompt":"`+strings.Repeat("b", 40<<20)+`"}`))
	if err != nil {
		t.Fatal(err)
	}
	io.Copy(io.Discard, resp.Body)
	resp.Body.Close()
	if resp.StatusCode != 200 {
		t.Fatalf("40 MiB once the budget is free: %d", resp.StatusCode)
	}
	m := n.metrics()
	for _, want := range []string{`narwhal_buffer_refusals_total{reason="budget"} 1`, `narwhal_buffer_refusals_total{reason="too_large"} 1`} {
		if !strings.Contains(m, want) {
			t.Fatalf("metrics lack %s:\n%s", want, grepLines(m, "buffer"))
		}
	}
	for name, state := range n.engineStates() {
		if state != "admitted" {
			t.Fatalf("the refusals moved %s to %s", name, state)
		}
	}
}
