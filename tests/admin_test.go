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
	"github.com/narwhal-router/narwhal/transport/admin"
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

// adminRequest sends one raw-ish admin request: method, path, Host and extra headers as given.
func (h *harness) adminRequest(method, path, host string, headers ...string) int {
	h.t.Helper()
	req, err := http.NewRequest(method, h.admin+path, strings.NewReader("x"))
	if err != nil {
		h.t.Fatal(err)
	}
	if host != "" {
		req.Host = host
	}
	for i := 0; i+1 < len(headers); i += 2 {
		req.Header.Set(headers[i], headers[i+1])
	}
	resp, err := h.client.Do(req)
	if err != nil {
		h.t.Fatal(err)
	}
	io.Copy(io.Discard, resp.Body)
	resp.Body.Close()
	return resp.StatusCode
}

// Without server.admin_token (the default, on loopback) a browser cannot change anything: a
// cross-site form POST (text/plain, foreign Origin), a DNS-rebinding page (Host: evil.example)
// and a simple request without the admin header are refused, and no engine moves; the same
// change from a script (JSON or X-Narwhal-Admin, Host naming the listener) goes through
// (issue 26, item 3).
func TestTokenlessAdminRefusesBrowserRequests(t *testing.T) {
	h := start(t, setup{prefill: 1, decode: 1})
	_, port, _ := strings.Cut(strings.TrimPrefix(h.admin, "http://"), ":")
	for _, tc := range []struct {
		name, host string
		headers    []string
		want       int
	}{
		{"cross-site form post", "", []string{"Content-Type", "text/plain", "Origin", "http://evil.example"}, 403},
		{"dns rebinding", "evil.example:" + port, []string{"Content-Type", "text/plain", "Origin", "http://evil.example:" + port}, 421},
		{"rebinding with json", "evil.example:" + port, []string{"Content-Type", "application/json"}, 421},
		{"another port in Host", "127.0.0.1:1", []string{admin.AdminHeader, "1"}, 421},
		{"urlencoded form", "", []string{"Content-Type", "application/x-www-form-urlencoded"}, 403},
	} {
		if code := h.adminRequest("POST", "/engines/d0/eject?reason=csrf", tc.host, tc.headers...); code != tc.want {
			t.Errorf("%s: %d, want %d", tc.name, code, tc.want)
		}
	}
	if code := h.adminRequest("GET", "/engines", "evil.example:"+port); code != 421 {
		t.Errorf("a rebinding page reading /engines: %d, want 421", code)
	}
	for _, e := range h.engines() {
		if e.State != "admitted" {
			t.Fatalf("a refused request moved %s: %+v", e.Name, e)
		}
	}
	if code := h.adminRequest("POST", "/engines/d0/eject?reason=script", "", "Content-Type", "application/json"); code != 200 {
		t.Fatalf("a script's JSON POST: %d", code)
	}
	if code := h.adminRequest("POST", "/engines/d0/readmit?force=true", "localhost:"+port, admin.AdminHeader, "1"); code != 200 {
		t.Fatalf("a script's POST with the admin header: %d", code)
	}
	if code := h.adminRequest("GET", "/engines", ""); code != 200 {
		t.Fatalf("GET /engines by address: %d", code)
	}
}

// The bearer scheme is case-insensitive on the admin listener as on the client API.
func TestAdminBearerSchemeIsCaseInsensitive(t *testing.T) {
	h := start(t, setup{prefill: 1, decode: 1, config: func(c *config.Config) { c.Server.AdminToken = "s3cret" }})
	for _, scheme := range []string{"Bearer", "bearer", "BEARER", "bEaReR"} {
		if code := h.adminRequest("GET", "/engines", "", "Authorization", scheme+" s3cret"); code != 200 {
			t.Errorf("%s: %d, want 200", scheme, code)
		}
	}
	for _, v := range []string{"bearer s3cre", "Basic s3cret", "s3cret", "bearers3cret"} {
		if code := h.adminRequest("GET", "/engines", "", "Authorization", v); code != 401 {
			t.Errorf("%q: %d, want 401", v, code)
		}
	}
	// With a token, a browser cannot send the header: a tokened POST needs no other proof.
	if code := h.adminRequest("POST", "/engines/d0/eject", "", "Authorization", "bearer s3cret"); code != 200 {
		t.Fatalf("tokened eject: %d", code)
	}
}
