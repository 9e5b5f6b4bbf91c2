package tests

import (
	"bufio"
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"net"
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
	for name, req := range shapes {
		status := rawExchange(t, addr, req)
		switch {
		case name == "a well-formed request ok":
			if !strings.HasPrefix(status, "HTTP/1.1 200") {
				t.Errorf("%s: %q", name, status)
			}
		case strings.HasPrefix(status, "HTTP/1.1 2"):
			t.Errorf("%s was served: %q", name, status)
		}
	}
	// A flood of malformed requests is logged a bounded number of times.
	for range 60 {
		rawExchange(t, addr, shapes["header without a colon"])
	}
	eventually(t, 5*time.Second, func() bool { return bytes.Contains(n.log.Bytes(), []byte("client connection failed")) },
		func() string { return "no connection error logged:\n" + string(n.log.Bytes()) })
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
