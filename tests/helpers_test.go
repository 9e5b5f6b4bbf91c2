package tests

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/narwhal-router/narwhal/bench/sim"
	"github.com/narwhal-router/narwhal/config"
)

// Helpers for the failure-semantics tests: request bodies, configuration tweaks, what a client
// saw of one request, and SSE parsing that keeps comments and error events apart.

var requestSeq atomic.Uint64

// newRequestID is a client X-Request-Id unique within the test binary, so that a request's
// access-log line can be found.
func newRequestID(t *testing.T) string {
	return fmt.Sprintf("%s-%d", strings.ReplaceAll(t.Name(), "/", "."), requestSeq.Add(1))
}

func jsonString(s string) string {
	b, _ := json.Marshal(s)
	return string(b)
}

// completion is a /v1/completions body; the prompt may carry @sim: directives.
func completion(prompt string, stream bool) string {
	return fmt.Sprintf(`{"model":"sim-model","prompt":%s,"stream":%t}`, jsonString(prompt), stream)
}

// chat is a /v1/chat/completions body with one user message.
func chat(content string, stream bool) string {
	return fmt.Sprintf(`{"model":"sim-model","messages":[{"role":"user","content":%s}],"stream":%t}`, jsonString(content), stream)
}

// configs applies several configuration tweaks in order.
func configs(fns ...func(*config.Config)) func(*config.Config) {
	return func(c *config.Config) {
		for _, f := range fns {
			f(c)
		}
	}
}

// timeouts sets engine.prefill_timeout_s, engine.first_token_timeout_s and
// engine.decode_read_timeout_s.
func timeouts(prefill, firstToken, read float64) func(*config.Config) {
	return func(c *config.Config) {
		c.Engine.PrefillTimeoutS = config.Seconds(prefill)
		c.Engine.FirstTokenTimeoutS = config.Seconds(firstToken)
		c.Engine.DecodeReadTimeoutS = config.Seconds(read)
	}
}

// deadline sets request.deadline_s.
func deadline(s float64) func(*config.Config) {
	return func(c *config.Config) { c.Request.DeadlineS = config.Seconds(s) }
}

// retries allows n attempts per request with a budget that never runs out.
func retries(n int) func(*config.Config) {
	return func(c *config.Config) {
		c.Recovery.MaxAttempts = n
		c.Recovery.RetryBudget = config.RetryBudget{Ratio: 1, MinPerS: 1000, WindowS: 10}
	}
}

// maxInflight caps every engine at n reservations.
func maxInflight(n int) func(*config.Config) {
	return func(c *config.Config) {
		for i := range c.Engines {
			c.Engines[i].MaxInflight = n
		}
	}
}

// result is what a client saw of one request.
type result struct {
	id      string
	status  int
	header  http.Header
	body    []byte
	elapsed time.Duration
}

// send posts body to path with a fresh X-Request-Id and reads the whole response.
func (h *harness) send(path, body string, headers ...string) result {
	h.t.Helper()
	id := newRequestID(h.t)
	start := time.Now()
	resp, b := h.post(path, body, append([]string{"X-Request-Id", id}, headers...)...)
	return result{id: id, status: resp.StatusCode, header: resp.Header, body: b, elapsed: time.Since(start)}
}

// errorObject is the inner object of an OpenAI error envelope.
type errorObject struct {
	Message string          `json:"message"`
	Type    string          `json:"type"`
	Param   *string         `json:"param"`
	Code    json.RawMessage `json:"code"`
}

// code is the envelope's code as text: a router fault kind ("silence") or an engine's status.
func (e errorObject) code() string { return strings.Trim(string(e.Code), `"`) }

// envelope parses an error response body, failing the test unless it is {"error":{...}}.
func envelope(t *testing.T, body []byte) errorObject {
	t.Helper()
	var env struct {
		Error *errorObject `json:"error"`
	}
	if err := json.Unmarshal(body, &env); err != nil || env.Error == nil {
		t.Fatalf("not an error envelope: %s", body)
	}
	return *env.Error
}

// expectError checks an error response before commit: the status, the envelope's code and the
// start of its message.
func expectError(t *testing.T, r result, status int, code, messagePrefix string) errorObject {
	t.Helper()
	if r.status != status {
		t.Fatalf("status %d, want %d: %s", r.status, status, r.body)
	}
	if ct := r.header.Get("Content-Type"); !strings.HasPrefix(ct, "application/json") {
		t.Fatalf("error response content type %q", ct)
	}
	e := envelope(t, r.body)
	if e.code() != code || !strings.HasPrefix(e.Message, messagePrefix) {
		t.Fatalf("error code %q message %q, want code %q and a message beginning %q", e.code(), e.Message, code, messagePrefix)
	}
	return e
}

// sseEvent is one event of a client stream: its data payload, or a comment.
type sseEvent struct {
	data    string
	comment bool
}

// parseSSE splits a client stream into events. A stream must be whole events, each either data
// lines or comment lines.
func parseSSE(t *testing.T, body []byte) []sseEvent {
	t.Helper()
	if len(body) > 0 && !bytes.HasSuffix(body, []byte("\n\n")) {
		t.Fatalf("stream does not end at an event boundary: %q", body)
	}
	var out []sseEvent
	for _, ev := range strings.Split(string(body), "\n\n") {
		switch {
		case ev == "":
		case strings.HasPrefix(ev, ":"):
			out = append(out, sseEvent{data: ev, comment: true})
		case strings.HasPrefix(ev, "data: ") && !strings.Contains(ev, "\n"):
			out = append(out, sseEvent{data: strings.TrimPrefix(ev, "data: ")})
		default:
			t.Fatalf("unexpected event %q in %q", ev, body)
		}
	}
	return out
}

// streamOutcome is how a client stream ended, checked against the contract: either [DONE] as
// the last event and no error event, or exactly one error event as the last event and no
// [DONE]; nothing after either.
type streamOutcome struct {
	done   bool
	err    *errorObject
	errRaw string // the error event's data, byte for byte
	text   string // the generated text (completions text, chat content), in order
	tokens int    // events that carried generated text
}

func readStream(t *testing.T, body []byte) streamOutcome {
	t.Helper()
	var o streamOutcome
	evs := parseSSE(t, body)
	for i, ev := range evs {
		if ev.comment {
			continue
		}
		last := i == len(evs)-1
		switch {
		case ev.data == "[DONE]":
			if !last || o.err != nil {
				t.Fatalf("[DONE] is not the last event or follows an error: %q", body)
			}
			o.done = true
		case strings.HasPrefix(ev.data, `{"error":`):
			if !last || o.done {
				t.Fatalf("the error event is not the last event: %q", body)
			}
			e := envelope(t, []byte(ev.data))
			o.err, o.errRaw = &e, ev.data
		default:
			var c struct {
				Choices []struct {
					Text  string `json:"text"`
					Delta struct {
						Content string `json:"content"`
					} `json:"delta"`
				} `json:"choices"`
			}
			if err := json.Unmarshal([]byte(ev.data), &c); err != nil {
				t.Fatalf("event is not JSON: %q", ev.data)
			}
			for _, ch := range c.Choices {
				if s := ch.Text + ch.Delta.Content; s != "" {
					o.text += s
					o.tokens++
				}
			}
		}
	}
	if !o.done && o.err == nil {
		t.Fatalf("stream ended with neither [DONE] nor an error event: %q", body)
	}
	return o
}

// expectDone checks a successful stream and returns its text.
func expectDone(t *testing.T, r result) streamOutcome {
	t.Helper()
	if r.status != 200 {
		t.Fatalf("status %d: %s", r.status, r.body)
	}
	o := readStream(t, r.body)
	if !o.done {
		t.Fatalf("stream failed: %s", o.errRaw)
	}
	return o
}

// expectTerminalError checks a stream that failed after commit: 200, the tokens before the
// failure, then exactly one error event with the given code and message prefix, and no [DONE].
func expectTerminalError(t *testing.T, r result, tokens int, code, messagePrefix string) streamOutcome {
	t.Helper()
	if r.status != 200 || !strings.HasPrefix(r.header.Get("Content-Type"), "text/event-stream") {
		t.Fatalf("status %d (%s), want a committed stream: %s", r.status, r.header.Get("Content-Type"), r.body)
	}
	o := readStream(t, r.body)
	if o.err == nil {
		t.Fatalf("stream ended with [DONE], want a terminal error event: %q", r.body)
	}
	if n := strings.Count(string(r.body), `data: {"error":`); n != 1 {
		t.Fatalf("%d error events, want exactly one: %q", n, r.body)
	}
	if o.text != expectedText(tokens) {
		t.Fatalf("text before the error %q, want %q", o.text, expectedText(tokens))
	}
	if o.err.code() != code || !strings.HasPrefix(o.err.Message, messagePrefix) {
		t.Fatalf("terminal event %s, want code %q and a message beginning %q", o.errRaw, code, messagePrefix)
	}
	return o
}

// accessLine returns the access-log record of the request with client id, waiting for the
// buffered log to flush.
func (h *harness) accessLine(id string) map[string]any {
	h.t.Helper()
	return h.accessByID(id)[id]
}

// accessByID returns the access-log records of the requests with the given client ids (the
// log flushes every 200 ms: wait once for many).
func (h *harness) accessByID(ids ...string) map[string]map[string]any {
	h.t.Helper()
	found := map[string]map[string]any{}
	eventually(h.t, 3*time.Second, func() bool {
		sc := bufio.NewScanner(bytes.NewReader(h.access.Bytes()))
		sc.Buffer(nil, 1<<20)
		for sc.Scan() {
			var m map[string]any
			if json.Unmarshal(sc.Bytes(), &m) == nil {
				found[str(m["request_id"])] = m
			}
		}
		for _, id := range ids {
			if found[id] == nil {
				return false
			}
		}
		return true
	}, func() string { return fmt.Sprintf("no access log line for some of %v", ids) })
	return found
}

// routingHeaders turns on server.expose_routing_headers, so a response says where it ran.
func routingHeaders(c *config.Config) { c.Server.ExposeRoutingHeaders = true }

// expectAccess checks a request's access-log record: its attempts and error_kind ("" for none).
func (h *harness) expectAccess(id string, status, attempts int, errorKind string) map[string]any {
	h.t.Helper()
	l := h.accessLine(id)
	if int(num(l["status"])) != status || int(num(l["attempts"])) != attempts || str(l["error_kind"]) != errorKind {
		h.t.Fatalf("access log: status %v attempts %v error_kind %q, want %d, %d, %q: %v",
			l["status"], l["attempts"], str(l["error_kind"]), status, attempts, errorKind, l)
	}
	return l
}

func num(v any) float64 {
	f, _ := v.(float64)
	return f
}

func str(v any) string {
	s, _ := v.(string)
	return s
}

// legCounts returns how many prefill and decode legs the fleet received.
func (h *harness) legCounts() (prefill, decode int) {
	return len(h.legs("prefill")), len(h.legs("decode"))
}

// expectLegs checks the number of legs the fleet received.
func (h *harness) expectLegs(prefill, decode int) {
	h.t.Helper()
	if p, d := h.legCounts(); p != prefill || d != decode {
		h.t.Fatalf("the fleet saw %d prefill and %d decode legs, want %d and %d", p, d, prefill, decode)
	}
}

// simEngine returns the simulated engine named name.
func (h *harness) simEngine(name string) *sim.Engine {
	h.t.Helper()
	e := h.fleet.Engine(name)
	if e == nil {
		h.t.Fatalf("no engine %s", name)
	}
	return e
}

// inject injects an engine-level fault for the next count matching legs.
func (h *harness) inject(engine, fault string, count int) {
	h.t.Helper()
	if err := h.simEngine(engine).InjectFault(fault, count); err != nil {
		h.t.Fatal(err)
	}
}

// expectAborted waits until engine has counted want aborted generations, up to limit.
func (h *harness) expectAborted(engine string, want int64, limit time.Duration) time.Duration {
	h.t.Helper()
	e := h.simEngine(engine)
	start := time.Now()
	eventually(h.t, limit, func() bool { return e.Stats().Aborted >= want }, func() string {
		return fmt.Sprintf("engine %s counted %d aborted generations within %v, want %d", engine, e.Stats().Aborted, limit, want)
	})
	return time.Since(start)
}

// quiesced waits until no engine of the fleet is serving a generation.
func (h *harness) quiesced() {
	h.t.Helper()
	eventually(h.t, 3*time.Second, func() bool {
		for _, e := range h.fleet.Engines {
			if e.Stats().InFlight != 0 {
				return false
			}
		}
		return true
	}, func() string {
		var s []string
		for _, e := range h.fleet.Engines {
			s = append(s, fmt.Sprintf("%s=%d", e.Name(), e.Stats().InFlight))
		}
		return "engine legs still running: " + strings.Join(s, " ")
	})
}

// requestPhase returns the supervisor phase of the live request with client id, or "".
func (h *harness) requestPhase(id string) string {
	ctx, cancel := context.WithTimeout(context.Background(), time.Second)
	defer cancel()
	for _, r := range h.srv.Router().Requests(ctx) {
		if r.ID == id {
			return r.Phase
		}
	}
	return ""
}

// startRequest sends a request whose client can hang up at any moment: cancel closes the
// connection. The response, if any, arrives on the returned channel (with its body read up to
// the hang-up).
func (h *harness) startRequest(path, body string, headers ...string) (id string, resp <-chan *http.Response, cancel context.CancelFunc) {
	h.t.Helper()
	id = newRequestID(h.t)
	resp, cancel = h.startWithID(id, path, body, headers...)
	return id, resp, cancel
}

// startWithID is startRequest with the request's X-Request-Id given.
func (h *harness) startWithID(id, path, body string, headers ...string) (<-chan *http.Response, context.CancelFunc) {
	h.t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, h.base+path, strings.NewReader(body))
	if err != nil {
		h.t.Fatal(err)
	}
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("X-Request-Id", id)
	for i := 0; i+1 < len(headers); i += 2 {
		req.Header.Set(headers[i], headers[i+1])
	}
	ch := make(chan *http.Response, 1)
	go func() {
		r, err := h.client.Do(req)
		if err != nil {
			ch <- nil
			return
		}
		ch <- r
	}()
	h.t.Cleanup(cancel)
	return ch, cancel
}

// readEvents reads a streaming response until it has n events with generated text.
func readEvents(t *testing.T, r io.Reader, n int) []byte {
	t.Helper()
	var got []byte
	br := bufio.NewReader(r)
	for strings.Count(string(got), `"text":" `)+strings.Count(string(got), `"content":" `) < n {
		line, err := br.ReadBytes('\n')
		got = append(got, line...)
		if err != nil {
			t.Fatalf("stream ended after %q: %v", got, err)
		}
	}
	return got
}
