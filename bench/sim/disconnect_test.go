package sim

import (
	"bytes"
	"net"
	"strings"
	"testing"
	"time"
)

// A client that goes away aborts the generation in every phase, and the engine counts
// it within well under 100 ms.
func TestClientDisconnectCountsAborted(t *testing.T) {
	t.Parallel()
	long := 10 * time.Second
	tests := []struct {
		name string
		opts Options
		path string
		body string
		saw  string // what the client has received when it hangs up ("" = nothing)
	}{
		{"waiting for a prefill response", Options{TTFT: long}, "/v1/completions", prefillBody(fortyWords), ""},
		{"waiting for a chat prefill response", Options{PrefillPerToken: long}, "/v1/chat/completions", chatPrefillBody("hi"), ""},
		{"hang_headers", Options{}, "/v1/completions", completionsStream("hi @sim:decode.hang_headers"), ""},
		{"non-streaming decode before its response", Options{TTFT: long}, "/v1/completions", completions("hi"), ""},
		{"hang_first_token", Options{}, "/v1/chat/completions", chatStream("hi @sim:decode.hang_first_token"), "text/event-stream"},
		{"waiting for the first token", Options{TTFT: long}, "/v1/completions", completionsStream("hi"), "text/event-stream"},
		{"silence_after", Options{}, "/v1/completions", completionsStream("hi @sim:decode.silence_after=2"), `" beta"`},
		{"mid-stream", Options{ITL: 50 * time.Millisecond, Tokens: 1000}, "/v1/chat/completions", chatStream("hi"), `" alpha"`},
		{"mid-stream, as fast as possible", Options{Tokens: 1 << 30, MaxModelLen: 1 << 31}, "/v1/completions", completionsStream("hi"), `" alpha"`},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			e := startEngine(t, tc.opts)
			conn, saw := readUntil(t, e.URL(), request(tc.path, tc.body), tc.saw)
			if tc.saw == "" && len(saw) != 0 || !strings.Contains(string(saw), tc.saw) {
				conn.Close()
				t.Fatalf("before hanging up the client saw %.300q, want %q", saw, tc.saw)
			}
			if s := e.Stats(); s.InFlight != 1 || s.Aborted != 0 {
				t.Errorf("before hanging up: %+v", s)
			}
			conn.Close()
			took := eventually(t, 100*time.Millisecond, "aborted counted", func() bool { return e.Stats().Aborted == 1 })
			t.Logf("abort counted %v after the hang-up", took)
			eventually(t, 100*time.Millisecond, "generation ended", func() bool { return e.Stats().InFlight == 0 })
			if s := e.Stats(); s.Completed != 0 || s.BlocksPinned != 0 {
				t.Errorf("after the abort: %+v (an aborted prefill pins nothing)", s)
			}
		})
	}
}

// Closing the engine ends hung requests without counting them as client aborts.
func TestCloseEndsHungRequests(t *testing.T) {
	t.Parallel()
	e, err := Start(Options{})
	if err != nil {
		t.Fatal(err)
	}
	w := exchange(t, e.URL(), request("/v1/completions", completionsStream("hi @sim:decode.hang_headers")), 30*time.Millisecond, true)
	defer w.conn.Close()
	start := time.Now()
	if err := e.Close(); err != nil {
		t.Fatal(err)
	}
	if took := time.Since(start); took > time.Second {
		t.Errorf("Close took %v with a hung request", took)
	}
	if s := e.Stats(); s.Aborted != 0 || s.InFlight != 0 {
		t.Errorf("after Close: %+v", s)
	}
}

// readUntil sends req and reads until the response holds want (or, for want "", until
// 30ms of silence), leaving the connection open.
func readUntil(t *testing.T, url string, req []byte, want string) (net.Conn, []byte) {
	t.Helper()
	conn, err := net.Dial("tcp", strings.TrimPrefix(url, "http://"))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := conn.Write(req); err != nil {
		t.Fatal(err)
	}
	var got []byte
	buf := make([]byte, 4096)
	for want == "" || !bytes.Contains(got, []byte(want)) {
		_ = conn.SetReadDeadline(time.Now().Add(30 * time.Millisecond))
		n, err := conn.Read(buf)
		got = append(got, buf[:n]...)
		if err != nil {
			break
		}
	}
	return conn, got
}
