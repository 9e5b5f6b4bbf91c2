package admin

import (
	"context"
	"errors"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/narwhal-router/narwhal/messages"
)

// noFleet answers the Fleet calls these tests never make.
type noFleet struct{}

func (noFleet) Ready() (bool, string) { return true, "" }
func (noFleet) Engines(context.Context) ([]messages.EngineState, error) {
	return nil, nil
}
func (noFleet) Eject(context.Context, string, string) (string, error) { return "", ErrUnknownEngine }
func (noFleet) Readmit(context.Context, string, bool) (string, error) { return "", ErrUnknownEngine }
func (noFleet) Tree(context.Context) (Tree, error)                    { return nil, errors.New("none") }
func (noFleet) ClusterStatus() any                                    { return nil }
func (noFleet) AddEngine(context.Context, []byte) (messages.EngineState, error) {
	return messages.EngineState{}, ErrInvalidEngine
}
func (noFleet) RemoveEngine(context.Context, string) error { return ErrUnknownEngine }
func (noFleet) Discovery() any                             { return nil }

// serve starts the admin handler on loopback with prom as /metrics; it returns the base URL.
func serve(t *testing.T, prom http.Handler) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	srv := httptest.NewUnstartedServer(Handler(noFleet{}, prom, "", ln.Addr().String()))
	srv.Listener.Close()
	srv.Listener = ln
	srv.Start()
	t.Cleanup(srv.Close)
	return srv.URL
}

func get(t *testing.T, url string, header ...string) (int, string) {
	t.Helper()
	req, _ := http.NewRequest("GET", url, nil)
	for i := 0; i+1 < len(header); i += 2 {
		req.Header.Set(header[i], header[i+1])
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(b)
}

// A profile's seconds are capped, and starting one is held to the rules of a change: an <img>
// tag on a web page (a plain GET from a browser on the operator's machine) cannot start one.
func TestProfilesAreCappedAndGuarded(t *testing.T) {
	base := serve(t, nil)
	for _, c := range []struct {
		path   string
		header []string
		status int
	}{
		{"/debug/pprof/profile?seconds=100000", nil, http.StatusForbidden}, // what an <img> tag sends
		{"/debug/pprof/trace?seconds=1", nil, http.StatusForbidden},
		{"/debug/pprof/heap?seconds=5", nil, http.StatusForbidden},
		{"/debug/pprof/profile?seconds=100000", []string{AdminHeader, "1"}, http.StatusBadRequest},
		{"/debug/pprof/profile?seconds=61", []string{AdminHeader, "1"}, http.StatusBadRequest},
		{"/debug/pprof/trace?seconds=0", []string{AdminHeader, "1"}, http.StatusBadRequest},
		{"/debug/pprof/heap?seconds=x", []string{AdminHeader, "1"}, http.StatusBadRequest},
		{"/debug/pprof/heap", nil, http.StatusOK}, // a snapshot is a read
		{"/debug/pprof/trace?seconds=1", []string{AdminHeader, "1"}, http.StatusOK},
	} {
		if code, body := get(t, base+c.path, c.header...); code != c.status {
			t.Errorf("GET %s %v: %d, want %d: %.200s", c.path, c.header, code, c.status, body)
		}
	}
}

// A client that sends its body slowly is cut off at the read timeout, one that does not read
// the answer at the write timeout: neither holds the listener's handler for longer.
func TestAdminReadAndWriteTimeouts(t *testing.T) {
	defer func(r, w time.Duration) { readTimeout, writeTimeout = r, w }(readTimeout, writeTimeout)
	readTimeout, writeTimeout = 200*time.Millisecond, 200*time.Millisecond

	wrote := make(chan error, 1)
	big := strings.Repeat("x", 1<<20)
	base := serve(t, http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		var err error
		for i := 0; i < 256 && err == nil; i++ { // 256 MiB: more than any socket buffer
			_, err = io.WriteString(w, big)
		}
		wrote <- err
	}))
	addr := strings.TrimPrefix(base, "http://")

	// Slow body: a POST that promises 100 bytes and sends none is answered (or closed) within
	// the read timeout, not held.
	conn, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	_, _ = io.WriteString(conn, "POST /engines HTTP/1.1\r\nHost: "+addr+"\r\n"+AdminHeader+": 1\r\nContent-Length: 100\r\n\r\n")
	_ = conn.SetReadDeadline(time.Now().Add(5 * time.Second))
	start := time.Now()
	buf, _ := io.ReadAll(conn)
	if took := time.Since(start); took > 3*time.Second {
		t.Fatalf("a stalled body held the connection %v (read %q)", took, buf)
	}

	// Slow reader: /metrics to a client that reads nothing fails its writes at the deadline.
	slow, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	defer slow.Close()
	_, _ = io.WriteString(slow, "GET /metrics HTTP/1.1\r\nHost: "+addr+"\r\n\r\n")
	select {
	case err := <-wrote:
		if err == nil {
			t.Fatal("256 MiB written to a client that reads nothing")
		}
	case <-time.After(5 * time.Second):
		t.Fatal("the handler is still writing to a client that reads nothing after 5 s")
	}
}
