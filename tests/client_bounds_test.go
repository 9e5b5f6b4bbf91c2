package tests

import (
	"bufio"
	"fmt"
	"io"
	"net"
	"net/http"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/narwhal-router/narwhal/bench/sim"
	"github.com/narwhal-router/narwhal/config"
)

// rawRequest is an HTTP/1.1 POST of body to path, as bytes on the wire.
func rawRequest(h *harness, path, body string, headers ...string) string {
	var b strings.Builder
	fmt.Fprintf(&b, "POST %s HTTP/1.1\r\nHost: %s\r\nContent-Type: application/json\r\nContent-Length: %d\r\n",
		path, strings.TrimPrefix(h.base, "http://"), len(body))
	for i := 0; i+1 < len(headers); i += 2 {
		fmt.Fprintf(&b, "%s: %s\r\n", headers[i], headers[i+1])
	}
	b.WriteString("\r\n")
	b.WriteString(body)
	return b.String()
}

// dial opens a raw client connection to the router, optionally with a small receive buffer.
func (h *harness) dial(rcvbuf int) *net.TCPConn {
	h.t.Helper()
	d := net.Dialer{}
	if rcvbuf > 0 {
		d.Control = func(_, _ string, rc syscall.RawConn) error {
			return rc.Control(func(fd uintptr) { _ = syscall.SetsockoptInt(int(fd), syscall.SOL_SOCKET, syscall.SO_RCVBUF, rcvbuf) })
		}
	}
	c, err := d.Dial("tcp", strings.TrimPrefix(h.base, "http://"))
	if err != nil {
		h.t.Fatal(err)
	}
	h.t.Cleanup(func() { c.Close() })
	return c.(*net.TCPConn)
}

// decodeEngine is the fleet's (first) decode engine.
func (h *harness) decodeEngine() *sim.Engine {
	h.t.Helper()
	for _, e := range h.fleet.Engines {
		if e.Role() == sim.RoleDecode {
			return e
		}
	}
	h.t.Fatal("no decode engine")
	return nil
}

// X-Narwhal-Deadline-S that is not a finite number of seconds within the allowed range is the
// client's error (400), not a 504 (issue 12, item 7).
func TestDeadlineHeaderMustBeFinite(t *testing.T) {
	h := start(t, setup{prefill: 1, decode: 1, engine: sim.Options{Tokens: 2}})
	for _, v := range []string{"NaN", "nan", "Inf", "+Inf", "-Inf", "1e300", "31536001", "-1", "0", "soon"} {
		r := h.send("/v1/completions", completion("hi", false), "X-Narwhal-Deadline-S", v)
		expectError(t, r, 400, "invalid_deadline", "X-Narwhal-Deadline-S must be a number of seconds greater than 0 and at most 31536000")
	}
	if r := h.send("/v1/completions", completion("hi", false), "X-Narwhal-Deadline-S", "31536000"); r.status != 200 {
		t.Fatalf("the largest allowed deadline: %d %s", r.status, r.body)
	}
	h.expectLegs(1, 1)
}

// Request headers up to server.max_header_bytes (16 KiB by default) are served; past it the
// client gets 431, and a client too slow to send its headers 408 (issue 12, item 6).
func TestHeaderLimitAndSlowHeaders(t *testing.T) {
	h := start(t, setup{prefill: 1, decode: 1, engine: sim.Options{Tokens: 2},
		config: func(c *config.Config) { c.Server.HeaderTimeoutS = 0.3 }})
	jwt := strings.Repeat("a", 12<<10) // a large bearer token or cookie
	if r := h.send("/v1/completions", completion("hi", false), "Authorization", "Bearer "+jwt); r.status != 200 {
		t.Fatalf("12 KiB of headers: %d %s", r.status, r.body)
	}
	r := h.send("/v1/completions", completion("hi", false), "Cookie", strings.Repeat("c", 20<<10))
	expectError(t, r, 431, "headers_too_large", "request line and headers are larger than server.max_header_bytes (16384 bytes)")

	c := h.dial(0)
	if _, err := io.WriteString(c, "POST /v1/completions HTTP/1.1\r\nHost: x\r\n"); err != nil {
		t.Fatal(err)
	}
	c.SetReadDeadline(time.Now().Add(5 * time.Second))
	resp, err := http.ReadResponse(bufio.NewReader(c), nil)
	if err != nil {
		t.Fatalf("no answer to a client that stalled in its headers: %v", err)
	}
	body, _ := io.ReadAll(resp.Body)
	if resp.StatusCode != 408 || !strings.Contains(string(body), "request_timeout") {
		t.Fatalf("stalled headers: %d %s, want 408", resp.StatusCode, body)
	}
}

// A client that sends its request and half-closes (shutdown(SHUT_WR)) is a hang-up: it gets no
// response at all — never an empty 200 — and its engine leg is aborted (issue 12, item 5).
func TestHalfClosedClientGetsNoSuccessStatus(t *testing.T) {
	for _, stream := range []bool{false, true} {
		t.Run(fmt.Sprintf("stream=%v", stream), func(t *testing.T) {
			h := start(t, setup{prefill: 1, decode: 1, engine: sim.Options{Tokens: 2}})
			id := newRequestID(t)
			c := h.dial(0)
			req := rawRequest(h, "/v1/completions", completion("hi @sim:decode.slow_first_token=2000", stream), "X-Request-Id", id)
			if _, err := io.WriteString(c, req); err != nil {
				t.Fatal(err)
			}
			if err := c.CloseWrite(); err != nil {
				t.Fatal(err)
			}
			c.SetReadDeadline(time.Now().Add(10 * time.Second))
			got, err := io.ReadAll(c)
			if err != nil && !strings.Contains(err.Error(), "reset") {
				t.Fatalf("reading after the half-close: %v", err)
			}
			if len(got) != 0 {
				t.Fatalf("a half-closed client was answered %q", got)
			}
			if o := str(h.accessLine(id)["outcome"]); o != "client_gone" {
				t.Fatalf("outcome %q, want client_gone", o)
			}
			// The hang-up may be seen before the decode leg started (a prefill may well finish);
			// a decode leg that did start (its first token is 2 s away) was aborted.
			h.quiesced()
			for _, e := range h.fleet.Engines {
				if st := e.Stats(); e.Role() == sim.RoleDecode && st.Completed != 0 {
					t.Fatalf("engine %s completed %d generations for a client that hung up", e.Name(), st.Completed)
				}
			}
		})
	}
}

// A client that stops reading cannot outlive the request deadline: its writes are bounded by
// it, so at the deadline the connection is closed, the engine leg aborted and the reservations
// released; with a deadline far away, server.client_write_timeout_s cuts it off (issue 12, item 2).
func TestStalledClientReleasedByDeadlineAndWriteTimeout(t *testing.T) {
	long := sim.Options{Tokens: 400000, MaxModelLen: 1 << 20}
	body := strings.Replace(completion("hi", true), `"stream":true`, `"stream":true,"max_tokens":400000`, 1)
	cases := []struct {
		name                 string
		deadline, writeLimit float64
	}{
		{"request deadline", 1, 30},
		{"client write timeout", 30, 0.5},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			h := start(t, setup{prefill: 1, decode: 1, engine: long, config: configs(deadline(tc.deadline),
				func(c *config.Config) { c.Server.ClientWriteTimeoutS = config.Seconds(tc.writeLimit) })})
			id := newRequestID(t)
			c := h.dial(4096)
			arrival := time.Now()
			if _, err := io.WriteString(c, rawRequest(h, "/v1/completions", body, "X-Request-Id", id)); err != nil {
				t.Fatal(err)
			}
			// The client never reads.
			h.expectAborted(h.decodeEngine().Name(), 1, 10*time.Second)
			took := time.Since(arrival)
			bound := time.Duration(min(tc.deadline, 30) * float64(time.Second))
			if tc.writeLimit < tc.deadline {
				bound = time.Duration(tc.writeLimit * float64(time.Second))
			}
			t.Logf("%s: engine leg aborted %v after arrival (bound %v)", tc.name, took, bound)
			if took > bound+3*time.Second {
				t.Fatalf("engine aborted %v after arrival, more than 3 s past the %v bound", took, bound)
			}
			// At the request deadline the stream ends with a terminal error event, which either
			// fits in the socket buffers the stream has not filled yet (a slow machine streams
			// less in a second) or does not, and the write bounded by the grace fails: the
			// stalled client is gone. Past the write timeout it is gone.
			line := h.accessLine(id)
			o, kind := str(line["outcome"]), str(line["error_kind"])
			deadlineEnded := tc.deadline < tc.writeLimit && o == "stream_error" && kind == "deadline_exceeded"
			if o != "client_gone" && !deadlineEnded {
				t.Fatalf("outcome %q (error kind %q), want client_gone or, at the request deadline, stream_error for deadline_exceeded", o, kind)
			}
			h.assertNoReservations()
		})
	}
}
