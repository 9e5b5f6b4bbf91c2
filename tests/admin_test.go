package tests

import (
	"bufio"
	"io"
	"net"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/narwhal-router/narwhal/config"
)

// With server.admin_token set, every profile route answers 401 without it, whatever the
// method or the spelling of the path; only GET /healthz and GET /readyz exactly are open.
func TestAdminTokenGuardsEveryProfileRoute(t *testing.T) {
	h := start(t, setup{prefill: 1, decode: 1, config: func(c *config.Config) { c.Server.AdminToken = "s3cret" }})
	for _, route := range []string{
		"GET /debug/pprof/", "GET /debug/pprof/heap", "GET /debug/pprof/goroutine?debug=2", "GET /debug/pprof/cmdline",
		"GET /debug/pprof/profile?seconds=1", "GET /debug/pprof/symbol", "POST /debug/pprof/symbol", "GET /debug/pprof/trace?seconds=1",
		"GET /debug/pprof", "GET /healthz/../debug/pprof/", "POST /healthz", "GET /readyz/",
	} {
		method, path, _ := strings.Cut(route, " ")
		if code, body := h.adminDo(method, path); code != 401 {
			t.Errorf("%s without the token: %d, want 401: %.200s", route, code, body)
		}
	}
	req, _ := http.NewRequest("GET", h.admin+"/debug/pprof/cmdline", nil)
	req.Header.Set("Authorization", "Bearer s3cret")
	resp, err := h.client.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	io.Copy(io.Discard, resp.Body)
	resp.Body.Close()
	if resp.StatusCode != 200 {
		t.Fatalf("pprof with the token: %d", resp.StatusCode)
	}
}

// An idle keep-alive connection to the admin listener is closed after
// server.admin_idle_timeout_s.
func TestAdminClosesIdleKeepAliveConnections(t *testing.T) {
	const idle = 300 * time.Millisecond
	h := start(t, setup{prefill: 1, decode: 1, config: func(c *config.Config) { c.Server.AdminIdleTimeoutS = config.Seconds(idle.Seconds()) }})
	conn, err := net.Dial("tcp", strings.TrimPrefix(h.admin, "http://"))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	if _, err := io.WriteString(conn, "GET /healthz HTTP/1.1\r\nHost: admin\r\n\r\n"); err != nil {
		t.Fatal(err)
	}
	br := bufio.NewReader(conn)
	resp, err := http.ReadResponse(br, nil)
	if err != nil {
		t.Fatal(err)
	}
	io.Copy(io.Discard, resp.Body)
	resp.Body.Close()
	if resp.StatusCode != 200 || resp.Close {
		t.Fatalf("healthz: %d, close=%v; want 200 on a kept-alive connection", resp.StatusCode, resp.Close)
	}
	answered := time.Now()
	conn.SetReadDeadline(time.Now().Add(idle + 5*time.Second))
	if n, err := br.ReadByte(); err != io.EOF {
		t.Fatalf("the idle connection was not closed: read %v, %v", n, err)
	}
	if took := time.Since(answered); took < idle-50*time.Millisecond {
		t.Fatalf("closed %v after the answer, before the %v idle timeout", took, idle)
	}
}
