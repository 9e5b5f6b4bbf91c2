package sim

import (
	"errors"
	"io"
	"net/http"
	"strings"
	"testing"
	"time"

	json "github.com/goccy/go-json"
)

const quiet = 150 * time.Millisecond

func completionsStream(prompt string) string {
	return `{"model":"sim-model","prompt":` + quote(prompt) + `,"stream":true}`
}

func chatStream(content string) string {
	return `{"model":"sim-model","messages":[{"role":"user","content":` + quote(content) + `}],"stream":true}`
}

func completions(prompt string) string {
	return `{"model":"sim-model","prompt":` + quote(prompt) + `}`
}

// Each fault does exactly what it says on the wire, read byte for byte from a raw TCP
// connection.
func TestFaultsOnTheWire(t *testing.T) {
	t.Parallel()
	tokenEvent := func(i int) string { return `"text":` + quote(TokenText(i)) }
	tests := []struct {
		name   string
		inject string // engine-level fault; "" when the body carries a directive
		path   string
		body   string
		check  func(t *testing.T, e *Engine, w wire)
	}{
		{name: "refuse closes without a response", path: "/v1/completions",
			body: completionsStream("hi @sim:decode.refuse"),
			check: func(t *testing.T, e *Engine, w wire) {
				if len(w.raw) != 0 || !w.closed {
					t.Errorf("want a silent close, got %q closed=%v", w.raw, w.closed)
				}
			}},
		{name: "injected refuse on the prefill leg", inject: "prefill.refuse", path: "/v1/completions",
			body: prefillBody("hi"),
			check: func(t *testing.T, e *Engine, w wire) {
				if len(w.raw) != 0 || !w.closed {
					t.Errorf("want a silent close, got %q closed=%v", w.raw, w.closed)
				}
			}},
		{name: "hang_headers sends nothing", path: "/v1/completions",
			body: completionsStream("hi @sim:any.hang_headers"),
			check: func(t *testing.T, e *Engine, w wire) {
				if len(w.raw) != 0 || !w.timedOut {
					t.Errorf("want silence, got %q", w.raw)
				}
			}},
		{name: "hang_first_token sends SSE headers only", path: "/v1/chat/completions",
			body: chatStream("hi @sim:decode.hang_first_token"),
			check: func(t *testing.T, e *Engine, w wire) {
				resp, body, _ := w.response(t)
				if resp.StatusCode != 200 || resp.Header.Get("Content-Type") != "text/event-stream; charset=utf-8" ||
					len(body) != 0 || !w.timedOut {
					t.Errorf("want 200 SSE headers and silence, got %d %q body %q", resp.StatusCode,
						resp.Header.Get("Content-Type"), body)
				}
			}},
		{name: "hang_first_token on a non-streaming decode hangs before headers", path: "/v1/completions",
			body: completions("hi @sim:decode.hang_first_token"),
			check: func(t *testing.T, e *Engine, w wire) {
				if len(w.raw) != 0 || !w.timedOut {
					t.Errorf("want silence, got %q", w.raw)
				}
			}},
		{name: "hang_first_token on a prefill hangs before headers", path: "/v1/completions",
			body: prefillBody("hi @sim:prefill.hang_first_token"),
			check: func(t *testing.T, e *Engine, w wire) {
				if len(w.raw) != 0 || !w.timedOut {
					t.Errorf("want silence, got %q", w.raw)
				}
			}},
		{name: "silence_after sends N tokens then stays open", path: "/v1/completions",
			body: completionsStream("hi @sim:decode.silence_after=2"),
			check: func(t *testing.T, e *Engine, w wire) {
				_, body, _ := w.response(t)
				ev := sseData(t, body)
				if len(ev) != 2 || !strings.Contains(ev[0], tokenEvent(0)) || !strings.Contains(ev[1], tokenEvent(1)) ||
					!w.timedOut {
					t.Errorf("want 2 tokens then silence, got %q timedOut=%v", ev, w.timedOut)
				}
			}},
		{name: "silence_after=0 on chat sends the role delta only", path: "/v1/chat/completions",
			body: chatStream("hi @sim:decode.silence_after=0"),
			check: func(t *testing.T, e *Engine, w wire) {
				_, body, _ := w.response(t)
				ev := sseData(t, body)
				if len(ev) != 1 || !strings.Contains(ev[0], `"delta":{"role":"assistant","content":""}`) || !w.timedOut {
					t.Errorf("want the role delta then silence, got %q", ev)
				}
			}},
		{name: "close_after drops the connection without [DONE]", path: "/v1/completions",
			body: completionsStream("hi @sim:decode.close_after=2"),
			check: func(t *testing.T, e *Engine, w wire) {
				_, body, err := w.response(t)
				ev := sseData(t, body)
				if len(ev) != 2 || !w.closed || !errors.Is(err, io.ErrUnexpectedEOF) {
					t.Errorf("want 2 tokens and a truncated body, got %q closed=%v err=%v", ev, w.closed, err)
				}
			}},
		{name: "close_after on a non-streaming request closes without a response", path: "/v1/completions",
			body: completions("hi @sim:decode.close_after=1"),
			check: func(t *testing.T, e *Engine, w wire) {
				if len(w.raw) != 0 || !w.closed {
					t.Errorf("want a silent close, got %q", w.raw)
				}
			}},
		{name: "done_first sends [DONE] before any token", path: "/v1/completions",
			body: completionsStream("hi @sim:decode.done_first"),
			check: func(t *testing.T, e *Engine, w wire) {
				resp, body, err := w.response(t)
				if resp.StatusCode != 200 || string(body) != "data: [DONE]\n\n" || err != nil {
					t.Errorf("want only [DONE], got %d %q %v", resp.StatusCode, body, err)
				}
			}},
		{name: "done_first on chat may send the role delta first", path: "/v1/chat/completions",
			body: chatStream("hi @sim:any.done_first"),
			check: func(t *testing.T, e *Engine, w wire) {
				_, body, _ := w.response(t)
				ev := sseData(t, body)
				if len(ev) != 2 || !strings.Contains(ev[0], `"role":"assistant"`) || ev[1] != "[DONE]" {
					t.Errorf("want role delta and [DONE], got %q", ev)
				}
			}},
		{name: "error_in_stream after N tokens, then [DONE]", path: "/v1/completions",
			body: completionsStream("hi @sim:decode.error_in_stream=503@2"),
			check: func(t *testing.T, e *Engine, w wire) {
				resp, body, err := w.response(t)
				ev := sseData(t, body)
				want := `{"error":{"message":"Service Unavailable (simulated fault)","type":"Service Unavailable","param":null,"code":503}}`
				if resp.StatusCode != 200 || err != nil || len(ev) != 4 || ev[2] != want || ev[3] != "[DONE]" {
					t.Errorf("want 2 tokens, %s, [DONE]; got %d %q %v", want, resp.StatusCode, ev, err)
				}
			}},
		{name: "error_in_stream on a non-streaming request is the HTTP error", path: "/v1/completions",
			body: completions("hi @sim:decode.error_in_stream=500"),
			check: func(t *testing.T, e *Engine, w wire) {
				resp, body, _ := w.response(t)
				if resp.StatusCode != 500 || !strings.Contains(string(body), `"type":"InternalServerError"`) {
					t.Errorf("want 500 InternalServerError, got %d %s", resp.StatusCode, body)
				}
			}},
		{name: "status=429 with Retry-After", path: "/v1/completions",
			body: completionsStream("hi @sim:any.status=429"),
			check: func(t *testing.T, e *Engine, w wire) {
				resp, body, _ := w.response(t)
				want := `{"error":{"message":"Too Many Requests (simulated fault)","type":"Too Many Requests","param":null,"code":429}}`
				if resp.StatusCode != 429 || resp.Header.Get("Retry-After") != "1" || string(body) != want {
					t.Errorf("got %d Retry-After=%q %s", resp.StatusCode, resp.Header.Get("Retry-After"), body)
				}
			}},
		{name: "injected status=503 on decode legs", inject: "decode.status=503", path: "/v1/chat/completions",
			body: chatStream("hi"),
			check: func(t *testing.T, e *Engine, w wire) {
				resp, _, _ := w.response(t)
				if resp.StatusCode != 503 || resp.Header.Get("Retry-After") != "1" {
					t.Errorf("got %d Retry-After=%q", resp.StatusCode, resp.Header.Get("Retry-After"))
				}
			}},
		{name: "status=400 is a BadRequestError without Retry-After", path: "/v1/completions",
			body: prefillBody("hi @sim:prefill.status=400"),
			check: func(t *testing.T, e *Engine, w wire) {
				resp, body, _ := w.response(t)
				if resp.StatusCode != 400 || resp.Header.Get("Retry-After") != "" ||
					!strings.Contains(string(body), `"type":"BadRequestError"`) {
					t.Errorf("got %d %q %s", resp.StatusCode, resp.Header.Get("Retry-After"), body)
				}
			}},
		{name: "a fault for the other leg does nothing", path: "/v1/completions",
			body: completionsStream("hi @sim:prefill.status=503 @sim:prefill.bad_descriptor=null"),
			check: func(t *testing.T, e *Engine, w wire) {
				resp, body, err := w.response(t)
				if resp.StatusCode != 200 || err != nil || !strings.HasSuffix(string(body), "data: [DONE]\n\n") {
					t.Errorf("want a normal stream, got %d %s %v", resp.StatusCode, body, err)
				}
			}},
		{name: "unknown directive is a 400 naming it", path: "/v1/completions",
			body: completionsStream("hi @sim:decode.explode"),
			check: func(t *testing.T, e *Engine, w wire) {
				resp, body, _ := w.response(t)
				if resp.StatusCode != 400 || !strings.Contains(string(body), "@sim:decode.explode") {
					t.Errorf("got %d %s", resp.StatusCode, body)
				}
			}},
		{name: "a prefill-only fault on the decode leg is a 400", path: "/v1/completions",
			body: completionsStream("hi @sim:decode.bad_descriptor=null"),
			check: func(t *testing.T, e *Engine, w wire) {
				resp, body, _ := w.response(t)
				if resp.StatusCode != 400 || !strings.Contains(string(body), "prefill leg only") {
					t.Errorf("got %d %s", resp.StatusCode, body)
				}
			}},
		{name: "tool_call on completions is a 400", path: "/v1/completions",
			body: completionsStream("hi @sim:decode.tool_call"),
			check: func(t *testing.T, e *Engine, w wire) {
				resp, _, _ := w.response(t)
				if resp.StatusCode != 400 {
					t.Errorf("got %d", resp.StatusCode)
				}
			}},
		{name: "tool_call in a chat response", path: "/v1/chat/completions",
			body: `{"messages":[{"role":"user","content":"weather @sim:decode.tool_call"}]}`,
			check: func(t *testing.T, e *Engine, w wire) {
				_, body, _ := w.response(t)
				want := `"message":{"role":"assistant","content":null,"tool_calls":[{"id":"chatcmpl-tool-`
				if !strings.Contains(string(body), want) ||
					!strings.Contains(string(body), `"arguments":"{\"city\": \"Oslo\"}"}}],"reasoning":null}`) ||
					!strings.Contains(string(body), `"finish_reason":"tool_calls"`) {
					t.Errorf("response %s", body)
				}
			}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			e := startEngine(t, Options{Tokens: 4})
			if tc.inject != "" {
				if err := e.InjectFault(tc.inject, 0); err != nil {
					t.Fatal(err)
				}
			}
			w := exchange(t, e.URL(), request(tc.path, tc.body), quiet, false)
			tc.check(t, e, w)
		})
	}
}

func TestSlowFirstToken(t *testing.T) {
	t.Parallel()
	e := startEngine(t, Options{Tokens: 1})
	for _, tc := range []struct{ name, body string }{
		{"decode", completionsStream("hi @sim:decode.slow_first_token=120")},
		{"prefill", prefillBody("hi @sim:any.slow_first_token=120")},
	} {
		start := time.Now()
		code, _, _ := post(t, e.URL(), "/v1/completions", tc.body)
		if took := time.Since(start); code != 200 || took < 120*time.Millisecond {
			t.Errorf("%s: %d after %v, want 200 after at least 120ms", tc.name, code, took)
		}
	}
}

// slow_headers holds the response headers back, and everything after them moves back
// by as much: a stream's first token comes after both delays.
func TestSlowHeaders(t *testing.T) {
	t.Parallel()
	e := startEngine(t, Options{Tokens: 1})
	start := time.Now()
	w := exchange(t, e.URL(), request("/v1/completions",
		completionsStream("hi @sim:decode.slow_headers=100 @sim:decode.slow_first_token=100")), quiet, false)
	resp, body, err := w.response(t)
	if resp.StatusCode != 200 || err != nil || !strings.HasSuffix(string(body), "data: [DONE]\n\n") {
		t.Fatalf("want a normal stream, got %d %q %v", resp.StatusCode, body, err)
	}
	if w.first < 100*time.Millisecond {
		t.Errorf("headers after %v, want at least 100ms", w.first)
	}
	if took := time.Since(start); took < 200*time.Millisecond {
		t.Errorf("stream over after %v, want the first token after at least 200ms", took)
	}
	start = time.Now()
	if code, _, _ := post(t, e.URL(), "/v1/completions", prefillBody("hi @sim:prefill.slow_headers=120")); code != 200 {
		t.Errorf("prefill: %d", code)
	}
	if took := time.Since(start); took < 120*time.Millisecond {
		t.Errorf("prefill answered after %v, want at least 120ms", took)
	}
}

// keepalive sends SSE comments while a stream waits, before the first token and between
// tokens, and nothing else changes.
func TestKeepAliveComments(t *testing.T) {
	t.Parallel()
	// Each wait is six keep-alive periods long: a loaded machine may run the ticker late, but
	// not five periods late, so each gap holds at least one comment.
	e := startEngine(t, Options{Tokens: 2, ITL: 150 * time.Millisecond})
	w := exchange(t, e.URL(), request("/v1/completions",
		completionsStream("hi @sim:decode.slow_first_token=150 @sim:decode.keepalive=25")), quiet, false)
	resp, body, err := w.response(t)
	if resp.StatusCode != 200 || err != nil {
		t.Fatalf("got %d %v", resp.StatusCode, err)
	}
	// gaps[i] counts the comments before data event i.
	var gaps []int
	var data []string
	n := 0
	for _, ev := range strings.Split(strings.TrimSuffix(string(body), "\n\n"), "\n\n") {
		if ev == ": keep-alive" {
			n++
			continue
		}
		data = append(data, ev)
		gaps = append(gaps, n)
		n = 0
	}
	if len(data) != 3 || data[2] != "data: [DONE]" {
		t.Fatalf("want 2 tokens and [DONE], got %q", body)
	}
	if gaps[0] < 1 || gaps[1] < 1 {
		t.Errorf("want keep-alive comments before the first token and between the tokens, got %v: %q", gaps, body)
	}
}

func TestBadDescriptors(t *testing.T) {
	t.Parallel()
	e := startEngine(t, Options{})
	kvPort := e.KVEndpoint()[strings.LastIndexByte(e.KVEndpoint(), ':')+1:]
	apiPort := e.URL()[strings.LastIndexByte(e.URL(), ':')+1:]
	tests := []struct {
		directive string
		check     func(t *testing.T, kv map[string]json.RawMessage, raw json.RawMessage)
	}{
		{"prefill.bad_descriptor=missing_engine", func(t *testing.T, kv map[string]json.RawMessage, raw json.RawMessage) {
			if _, ok := kv["remote_engine_id"]; ok || kv["remote_block_ids"] == nil {
				t.Errorf("descriptor %s still has remote_engine_id", raw)
			}
		}},
		{"prefill.bad_descriptor=bad_blocks", func(t *testing.T, kv map[string]json.RawMessage, raw json.RawMessage) {
			if string(kv["remote_block_ids"]) != `[1.5,-2,"x"]` {
				t.Errorf("descriptor %s", raw)
			}
		}},
		{"any.bad_descriptor=wrong_connector", func(t *testing.T, kv map[string]json.RawMessage, raw json.RawMessage) {
			if kv["transfer_id"] == nil || kv["remote_bootstrap_addr"] == nil || kv["remote_engine_id"] == nil {
				t.Errorf("descriptor %s lacks Mooncake fields", raw)
			}
		}},
		{"prefill.bad_descriptor=wrong_endpoint", func(t *testing.T, kv map[string]json.RawMessage, raw json.RawMessage) {
			if string(kv["remote_port"]) != apiPort || apiPort == kvPort {
				t.Errorf("descriptor %s: remote_port should be the API port %s, not the KV port %s", raw, apiPort, kvPort)
			}
		}},
		{"prefill.bad_descriptor=null", func(t *testing.T, kv map[string]json.RawMessage, raw json.RawMessage) {
			if string(raw) != "null" {
				t.Errorf("descriptor %s, want null", raw)
			}
		}},
		{"prefill.wrong_engine_id", func(t *testing.T, kv map[string]json.RawMessage, raw json.RawMessage) {
			var id string
			_ = json.Unmarshal(kv["remote_engine_id"], &id)
			if id == "" || id == e.EngineID() {
				t.Errorf("descriptor %s names the engine's own id %q", raw, e.EngineID())
			}
		}},
	}
	for _, tc := range tests {
		code, _, body := post(t, e.URL(), "/v1/completions", prefillBody("hi @sim:"+tc.directive))
		raw := descriptorOf(t, body)
		var kv map[string]json.RawMessage
		_ = json.Unmarshal(raw, &kv)
		if code != 200 {
			t.Errorf("%s: status %d", tc.directive, code)
		}
		t.Run(tc.directive, func(t *testing.T) { tc.check(t, kv, raw) })
	}
	// Every variant but null pins its prompt's blocks (they will expire unread).
	want := 0
	for _, tc := range tests {
		if tc.directive != "prefill.bad_descriptor=null" {
			want += (PromptTokens("hi @sim:"+tc.directive) + 15) / 16
		}
	}
	if got := e.Stats().BlocksPinned; got != int64(want) {
		t.Errorf("blocks pinned %d, want %d", got, want)
	}
}

func TestInjectedFaultCountsAndClear(t *testing.T) {
	t.Parallel()
	e := startEngine(t, Options{Tokens: 1})
	if err := e.InjectFault("any.status=503", 2); err != nil {
		t.Fatal(err)
	}
	if err := e.InjectFault("prefill.status=500", 0); err != nil {
		t.Fatal(err)
	}
	codes := func(path, body string, n int) []int {
		var out []int
		for range n {
			code, _, _ := post(t, e.URL(), path, body)
			out = append(out, code)
		}
		return out
	}
	// any.status=503 is consumed by the first two generations of either leg; the
	// prefill.status=500 that follows on a prefill leg overrides it there.
	if got := codes("/v1/completions", completions("hi"), 1); got[0] != 503 {
		t.Errorf("first decode %v, want 503", got)
	}
	if got := codes("/v1/completions", prefillBody("hi"), 1); got[0] != 500 {
		t.Errorf("prefill %v, want 500", got)
	}
	if got := codes("/v1/completions", completions("hi"), 2); got[0] != 200 || got[1] != 200 {
		t.Errorf("decodes after the count ran out %v, want 200s", got)
	}
	if got := codes("/v1/completions", prefillBody("hi"), 2); got[0] != 500 || got[1] != 500 {
		t.Errorf("prefills with an uncounted fault %v, want 500s", got)
	}

	code, _, body := get(t, e.URL()+"/sim/faults")
	if code != 200 || string(body) != `{"faults":[{"fault":"prefill.status=500","remaining":-1}]}` {
		t.Errorf("GET /sim/faults: %d %s", code, body)
	}
	req, _ := http.NewRequest(http.MethodDelete, e.URL()+"/sim/faults", nil)
	if code, _, body := do(t, req); code != 200 || string(body) != `{"faults":[]}` {
		t.Errorf("DELETE /sim/faults: %d %s", code, body)
	}
	if got := codes("/v1/completions", prefillBody("hi"), 1); got[0] != 200 {
		t.Errorf("prefill after clearing %v, want 200", got)
	}

	code, _, body = post(t, e.URL(), "/sim/faults", `{"fault":"decode.close_after=1","count":1}`)
	if code != 200 || !strings.Contains(string(body), `"remaining":1`) {
		t.Errorf("POST /sim/faults: %d %s", code, body)
	}
	w := exchange(t, e.URL(), request("/v1/completions", completionsStream("hi")), quiet, false)
	if _, _, err := w.response(t); !errors.Is(err, io.ErrUnexpectedEOF) {
		t.Errorf("injected close_after: body error %v, want a truncated stream", err)
	}
	for _, bad := range []string{`{"fault":"decode.nope"}`, `{"fault":"sideways.refuse"}`, `{"fault":""}`, `not json`} {
		if code, _, body := post(t, e.URL(), "/sim/faults", bad); code != 400 {
			t.Errorf("POST /sim/faults %s: %d %s, want 400", bad, code, body)
		}
	}
}

func TestParseFault(t *testing.T) {
	t.Parallel()
	tests := []struct {
		spec string
		want fault
		err  string
	}{
		{spec: "decode.silence_after=3", want: fault{leg: legDecodeOnly, kind: faultSilenceAfter, n: 3}},
		{spec: "any.error_in_stream=503@7", want: fault{leg: legAny, kind: faultErrorInStream, code: 503, n: 7}},
		{spec: "any.error_in_stream=500", want: fault{leg: legAny, kind: faultErrorInStream, code: 500}},
		{spec: "prefill.slow_first_token=250", want: fault{leg: legPrefillOnly, kind: faultSlowFirstToken, delay: 250 * time.Millisecond}},
		{spec: "prefill.bad_descriptor=bad_blocks", want: fault{leg: legPrefillOnly, kind: faultBadDescriptor, variant: badBlocks}},
		{spec: "decode.reasoning=2", want: fault{leg: legDecodeOnly, kind: faultReasoning, n: 2}},
		{spec: "any.slow_headers=40", want: fault{leg: legAny, kind: faultSlowHeaders, delay: 40 * time.Millisecond}},
		{spec: "decode.keepalive=15", want: fault{leg: legDecodeOnly, kind: faultKeepAlive, delay: 15 * time.Millisecond}},
		{spec: "decode.keepalive=0", err: "bad argument"},
		{spec: "prefill.kv_port=5999", want: fault{leg: legPrefillOnly, kind: faultKVPort, n: 5999}},
		{spec: "prefill.kv_port=0", err: "bad argument"},
		{spec: "decode.kv_port=5999", err: "prefill leg only"},
		{spec: "prefill.keepalive=10", err: "decode leg only"},
		{spec: "refuse", err: "want <leg>.<fault>"},
		{spec: "both.refuse", err: "unknown leg"},
		{spec: "any.refuse=1", err: "takes no argument"},
		{spec: "any.status", err: "needs an argument"},
		{spec: "any.status=200", err: "bad argument"},
		{spec: "any.silence_after=-1", err: "bad argument"},
		{spec: "any.error_in_stream=500@x", err: "bad argument"},
		{spec: "prefill.bad_descriptor=weird", err: "bad argument"},
		{spec: "decode.wrong_engine_id", err: "prefill leg only"},
		{spec: "prefill.tool_call", err: "decode leg only"},
	}
	for _, tc := range tests {
		got, err := parseFault(tc.spec)
		if tc.err != "" {
			if err == nil || !strings.Contains(err.Error(), tc.err) {
				t.Errorf("parseFault(%q) error %v, want one containing %q", tc.spec, err, tc.err)
			}
			continue
		}
		tc.want.spec = tc.spec
		if err != nil || got != tc.want {
			t.Errorf("parseFault(%q) = %+v, %v; want %+v", tc.spec, got, err, tc.want)
		}
	}
	ds, err := parseDirectives("a @sim:decode.refuse b\n@sim:any.status=503\tc", false)
	if err != nil || len(ds) != 2 || ds[0].kind != faultRefuse || ds[1].code != 503 {
		t.Errorf("parseDirectives = %+v, %v", ds, err)
	}
	if _, err := parseDirectives("x @sim:", false); err == nil {
		t.Error("an empty directive parsed")
	}
}
