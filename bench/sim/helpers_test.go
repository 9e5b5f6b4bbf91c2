package sim

import (
	"bufio"
	"bytes"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"strings"
	"testing"
	"time"

	json "github.com/goccy/go-json"
	"go.uber.org/goleak"

	"github.com/narwhal-router/narwhal/internal/testwait"
)

func TestMain(m *testing.M) {
	// zmq4 v0.17.0's PUB socket never ends its writer goroutine: Close closes the socket's
	// connections and listener but not the writer (pubMWriter.run waits on its condition
	// for good). One idle goroutine per KV events publisher, nothing else.
	goleak.VerifyTestMain(m, goleak.IgnoreAnyFunction("github.com/go-zeromq/zmq4.(*pubMWriter).run"))
}

// startEngine starts an engine that the test closes on cleanup.
func startEngine(t testing.TB, o Options) *Engine {
	t.Helper()
	e, err := Start(o)
	if err != nil {
		t.Fatalf("Start: %v", err)
	}
	t.Cleanup(func() {
		if err := e.Close(); err != nil {
			t.Errorf("Close: %v", err)
		}
	})
	return e
}

// wire is what a raw TCP client saw of one exchange.
type wire struct {
	raw      []byte        // every byte the server sent
	closed   bool          // the server closed the connection
	timedOut bool          // the server went quiet for the whole quiet period
	first    time.Duration // time from the request to the first byte, if any
	conn     net.Conn      // still open when keepOpen was asked for
}

// response parses w.raw as an HTTP response. body is as much of the body as arrived;
// bodyErr is io.ErrUnexpectedEOF for a body cut short.
func (w wire) response(t testing.TB) (resp *http.Response, body []byte, bodyErr error) {
	t.Helper()
	resp, err := http.ReadResponse(bufio.NewReader(bytes.NewReader(w.raw)), nil)
	if err != nil {
		t.Fatalf("parse response %q: %v", w.raw, err)
	}
	body, bodyErr = io.ReadAll(resp.Body)
	return resp, body, bodyErr
}

// request builds a raw HTTP/1.1 POST with Connection: close.
func request(path, body string, header ...string) []byte {
	var b bytes.Buffer
	fmt.Fprintf(&b, "POST %s HTTP/1.1\r\nHost: sim\r\nContent-Type: application/json\r\nConnection: close\r\n", path)
	for i := 0; i+1 < len(header); i += 2 {
		fmt.Fprintf(&b, "%s: %s\r\n", header[i], header[i+1])
	}
	fmt.Fprintf(&b, "Content-Length: %d\r\n\r\n%s", len(body), body)
	return b.Bytes()
}

// exchange sends req over a fresh TCP connection to e's API and reads until the server
// closes the connection or sends nothing for quiet. With keepOpen the connection is
// left open in w.conn (the caller closes it); otherwise it is closed.
func exchange(t testing.TB, addr string, req []byte, quiet time.Duration, keepOpen bool) wire {
	t.Helper()
	conn, err := net.Dial("tcp", strings.TrimPrefix(addr, "http://"))
	if err != nil {
		t.Fatalf("dial: %v", err)
	}
	start := time.Now()
	if _, err := conn.Write(req); err != nil {
		t.Fatalf("write request: %v", err)
	}
	var w wire
	buf := make([]byte, 64<<10)
	for {
		_ = conn.SetReadDeadline(time.Now().Add(quiet))
		n, err := conn.Read(buf)
		if n > 0 && len(w.raw) == 0 {
			w.first = time.Since(start)
		}
		w.raw = append(w.raw, buf[:n]...)
		var ne net.Error
		switch {
		case err == nil:
			continue
		case errors.As(err, &ne) && ne.Timeout():
			w.timedOut = true
		default:
			w.closed = true // EOF or reset
		}
		break
	}
	_ = conn.SetReadDeadline(time.Time{})
	if keepOpen {
		w.conn = conn
	} else {
		conn.Close()
	}
	return w
}

// sseData splits an SSE body into its data payloads.
func sseData(t testing.TB, body []byte) []string {
	t.Helper()
	var out []string
	for _, ev := range strings.Split(string(body), "\n\n") {
		if ev == "" {
			continue
		}
		data, ok := strings.CutPrefix(ev, "data: ")
		if !ok {
			t.Fatalf("event %q is not a data line", ev)
		}
		out = append(out, data)
	}
	return out
}

// post sends a request with net/http's client (no keep-alive) and returns the status
// and the whole body.
func post(t testing.TB, url, path, body string, header ...string) (int, http.Header, []byte) {
	t.Helper()
	req, err := http.NewRequest(http.MethodPost, url+path, strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Content-Type", "application/json")
	for i := 0; i+1 < len(header); i += 2 {
		req.Header.Set(header[i], header[i+1])
	}
	return do(t, req)
}

func get(t testing.TB, url string) (int, http.Header, []byte) {
	t.Helper()
	req, err := http.NewRequest(http.MethodGet, url, nil)
	if err != nil {
		t.Fatal(err)
	}
	return do(t, req)
}

var testClient = &http.Client{Transport: &http.Transport{DisableKeepAlives: true, Proxy: nil}, Timeout: 10 * time.Second}

func do(t testing.TB, req *http.Request) (int, http.Header, []byte) {
	t.Helper()
	resp, err := testClient.Do(req)
	if err != nil {
		t.Fatalf("%s %s: %v", req.Method, req.URL, err)
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatalf("%s %s: read body: %v", req.Method, req.URL, err)
	}
	return resp.StatusCode, resp.Header, body
}

// eventually polls cond every millisecond until it holds or limit passes, and returns
// how long it took.
func eventually(t testing.TB, limit time.Duration, what string, cond func() bool) time.Duration {
	t.Helper()
	return testwait.UntilEvery(t, limit, time.Millisecond, cond, func() string { return what })
}

// prefillBody is a router-style prefill request (prefill-request.json's shape).
func prefillBody(prompt string) string {
	return `{"model":"sim-model","prompt":` + quote(prompt) + `,"max_tokens":1,"stream":false,` +
		`"kv_transfer_params":{"do_remote_decode":true,"do_remote_prefill":false,"remote_engine_id":null,` +
		`"remote_block_ids":null,"remote_host":null,"remote_port":null}}`
}

func chatPrefillBody(content string) string {
	return `{"model":"sim-model","messages":[{"role":"user","content":` + quote(content) + `}],"max_tokens":1,` +
		`"stream":false,"kv_transfer_params":{"do_remote_decode":true,"do_remote_prefill":false}}`
}

func quote(s string) string { return string(appendString(nil, s)) }

// descriptorOf returns the raw kv_transfer_params of a non-streaming response.
func descriptorOf(t testing.TB, body []byte) json.RawMessage {
	t.Helper()
	var resp struct {
		KV json.RawMessage `json:"kv_transfer_params"`
	}
	if err := json.Unmarshal(body, &resp); err != nil {
		t.Fatalf("response %s: %v", body, err)
	}
	return resp.KV
}

// withKV returns the JSON object body with kv_transfer_params set to kv.
func withKV(t testing.TB, body string, kv json.RawMessage) string {
	t.Helper()
	var m map[string]json.RawMessage
	if err := json.Unmarshal([]byte(body), &m); err != nil {
		t.Fatal(err)
	}
	m["kv_transfer_params"] = kv
	out, err := json.Marshal(m)
	if err != nil {
		t.Fatal(err)
	}
	return string(out)
}

func readFixture(t testing.TB, name string) []byte {
	t.Helper()
	b, err := os.ReadFile("testdata/vllm/" + name)
	if err != nil {
		t.Fatal(err)
	}
	return b
}
