package sim

import (
	"fmt"
	"net"
	"regexp"
	"strings"
	"testing"
	"time"

	json "github.com/goccy/go-json"

	"github.com/narwhal-router/narwhal/bench/sim/tokenizer"
)

// fortyWords is a 40-token prompt: 3 blocks of 16, the last partial.
var fortyWords = words("forty", 40)

// chatBlocks is the KV blocks of a one-message chat prompt of content, template included,
// in the grouped layout (a sliding-window group of up to 4 blocks beside the full one).
func chatBlocksGrouped(content string) int64 {
	n := int64(tokenizer.Default().Count(tokenizer.ChatML([]tokenizer.Message{{Role: "user", Content: content}}, true)))
	b := (n + 15) / 16
	return b + min(b, slidingWindowBlocks)
}

func TestHandoffEndToEnd(t *testing.T) {
	t.Parallel()
	const ttft, perToken = 30 * time.Millisecond, 10 * time.Millisecond
	for _, tc := range []struct {
		name, layout, path string
		prefill, decode    string
		idPattern          string
		blocks             int64
	}{
		{"completions flat", KVLayoutFlat, "/v1/completions", prefillBody(fortyWords),
			`{"model":"sim-model","prompt":"` + fortyWords + `","max_tokens":3,"stream":true,"stream_options":{"include_usage":true}}`,
			`^cmpl-h1-0-[0-9a-f]{8}$`, 3},
		{"chat grouped", KVLayoutGrouped, "/v1/chat/completions", chatPrefillBody(fortyWords),
			`{"model":"sim-model","messages":[{"role":"user","content":"` + fortyWords + `"}],"max_tokens":3,"stream":true,"stream_options":{"include_usage":true}}`,
			`^chatcmpl-h1-[0-9a-f]{8}$`, chatBlocksGrouped(fortyWords)},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			f, err := StartFleet(FleetOptions{Prefill: 1, Decode: 1, Engine: Options{
				KVLayout: tc.layout, TTFT: ttft, PrefillPerToken: perToken}})
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { _ = f.Close() })
			p, d := f.Engine("p0"), f.Engine("d0")

			start := time.Now()
			code, _, body := post(t, p.URL(), tc.path, tc.prefill, "X-Request-Id", "h1")
			if took := time.Since(start); code != 200 || took < ttft+40*perToken {
				t.Fatalf("prefill: %d after %v (want 200 after ttft + 40 × prefill-per-token) %s", code, took, body)
			}
			raw := descriptorOf(t, body)
			var kv struct {
				Engine    string `json:"remote_engine_id"`
				RequestID string `json:"remote_request_id"`
				Host      string `json:"remote_host"`
				Port      int    `json:"remote_port"`
			}
			if err := json.Unmarshal(raw, &kv); err != nil {
				t.Fatal(err)
			}
			if kv.Engine != p.EngineID() || net.JoinHostPort(kv.Host, itoa(kv.Port)) != p.KVEndpoint() ||
				!regexp.MustCompile(tc.idPattern).MatchString(kv.RequestID) {
				t.Errorf("descriptor %s does not name p0 (%s at %s) or its request id does not match %s",
					raw, p.EngineID(), p.KVEndpoint(), tc.idPattern)
			}
			if s := p.Stats(); s.BlocksPinned != tc.blocks || s.PrefillRequests != 1 {
				t.Errorf("after prefill: %+v, want %d blocks pinned", s, tc.blocks)
			}

			start = time.Now()
			code, _, body = post(t, d.URL(), tc.path, withKV(t, tc.decode, raw), "X-Request-Id", "h1")
			took := time.Since(start)
			if code != 200 {
				t.Fatalf("decode: %d %s", code, body)
			}
			if took < ttft || took > ttft+20*perToken {
				t.Errorf("decode took %v: the first token should come after ttft (%v), without the prefill time", took, ttft)
			}
			ev := sseData(t, body)
			prompt := 40
			if tc.layout == KVLayoutGrouped { // the chat case: the template's tokens too
				prompt = tokenizer.Default().Count(tokenizer.ChatML([]tokenizer.Message{{Role: "user", Content: fortyWords}}, true))
			}
			text := ""
			for _, e := range ev[:len(ev)-2] {
				var chunk struct {
					Choices []struct {
						Text  string `json:"text"`
						Delta struct {
							Content string `json:"content"`
						} `json:"delta"`
					} `json:"choices"`
				}
				if err := json.Unmarshal([]byte(e), &chunk); err != nil {
					t.Fatal(err)
				}
				text += chunk.Choices[0].Text + chunk.Choices[0].Delta.Content
			}
			if text != " alpha beta gamma" || ev[len(ev)-1] != "[DONE]" ||
				!strings.Contains(ev[len(ev)-2], fmt.Sprintf(`"usage":{"prompt_tokens":%d,"total_tokens":%d,"completion_tokens":3}`, prompt, prompt+3)) {
				t.Errorf("decode stream %q: text %q", ev, text)
			}
			if s := p.Stats(); s.BlocksRead != tc.blocks || s.BlocksPinned != 0 {
				t.Errorf("producer after decode: %+v, want %d blocks read and none pinned", s, tc.blocks)
			}
			if s := d.Stats(); s.KVLoads != 1 || s.DecodeRequests != 1 || s.KVLoadFailures != 0 {
				t.Errorf("consumer after decode: %+v", s)
			}
		})
	}
}

func itoa(n int) string { b := appendInt(nil, n); return string(b) }

// A decode whose KV load fails answers 500 with vLLM's envelope before any byte of the
// stream (the read happens before the headers), and the producer's blocks stay put.
func TestHandoffFailures(t *testing.T) {
	t.Parallel()
	closed, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	closedPort := closed.Addr().(*net.TCPAddr).Port
	closed.Close()

	edit := func(f func(m map[string]json.RawMessage)) func(t *testing.T, p *Engine, kv json.RawMessage) json.RawMessage {
		return func(t *testing.T, p *Engine, kv json.RawMessage) json.RawMessage {
			m := kvMap(t, kv)
			f(m)
			out, _ := json.Marshal(m)
			return out
		}
	}
	tests := []struct {
		name      string
		directive string // on the prefill
		lease     time.Duration
		before    func(t *testing.T, p *Engine, kv json.RawMessage) json.RawMessage
		want      string
	}{
		{name: "unknown engine id", directive: "@sim:prefill.wrong_engine_id", want: "unknown engine id"},
		{name: "producer restarted", before: func(t *testing.T, p *Engine, kv json.RawMessage) json.RawMessage {
			p.Restart()
			return kv
		}, want: "unknown engine id"},
		{name: "lease expired", lease: 40 * time.Millisecond,
			before: func(t *testing.T, p *Engine, kv json.RawMessage) json.RawMessage {
				eventually(t, 5*time.Second, "the producer's lease runs out", func() bool {
					s := p.Stats()
					return s.BlocksExpired > 0 && s.BlocksPinned == 0
				})
				return kv
			}, want: "no pinned blocks"},
		{name: "blocks already read", before: func(t *testing.T, p *Engine, kv json.RawMessage) json.RawMessage {
			h, err := parseHandoff(kvMap(t, kv))
			if err != nil {
				t.Fatal(err)
			}
			if _, err := p.readRemoteBlocks(t.Context(), h); err != nil {
				t.Fatal(err)
			}
			return kv
		}, want: "no pinned blocks"},
		{name: "other block ids", before: edit(func(m map[string]json.RawMessage) {
			m["remote_block_ids"] = json.RawMessage(`[999]`)
		}), want: "block ids differ"},
		{name: "missing remote_engine_id", directive: "@sim:prefill.bad_descriptor=missing_engine", want: "lacks remote_engine_id"},
		{name: "missing remote_request_id", before: edit(func(m map[string]json.RawMessage) {
			delete(m, "remote_request_id")
		}), want: "lacks remote_request_id"},
		{name: "missing remote_host", before: edit(func(m map[string]json.RawMessage) { delete(m, "remote_host") }),
			want: "lacks remote_host"},
		{name: "missing remote_port", before: edit(func(m map[string]json.RawMessage) { delete(m, "remote_port") }),
			want: "lacks remote_port"},
		{name: "missing remote_block_ids", before: edit(func(m map[string]json.RawMessage) { delete(m, "remote_block_ids") }),
			want: "lacks remote_block_ids"},
		{name: "malformed block ids", directive: "@sim:prefill.bad_descriptor=bad_blocks", want: "remote_block_ids must be"},
		{name: "remote_port as a string", before: edit(func(m map[string]json.RawMessage) {
			m["remote_port"] = json.RawMessage(`"` + string(m["remote_port"]) + `"`)
		}), want: "remote_port must be an integer"},
		{name: "wrong endpoint (the API port)", directive: "@sim:prefill.bad_descriptor=wrong_endpoint",
			want: "not a KV side channel"},
		{name: "nothing listening", before: edit(func(m map[string]json.RawMessage) {
			m["remote_port"] = json.RawMessage(itoa(closedPort))
		}), want: "connection refused"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			p := startEngine(t, Options{Role: RolePrefill, KVLease: tc.lease})
			d := startEngine(t, Options{Role: RoleDecode})
			_, _, body := post(t, p.URL(), "/v1/completions", prefillBody(fortyWords+tc.directive))
			kv := descriptorOf(t, body)
			if tc.before != nil {
				kv = tc.before(t, p, kv)
			}
			readBefore := p.Stats().BlocksRead
			w := exchange(t, d.URL(), request("/v1/completions",
				withKV(t, completionsStream(fortyWords), kv)), time.Second, false)
			resp, body, _ := w.response(t)
			var env struct {
				Error struct {
					Message, Type string
					Code          int
				}
			}
			_ = json.Unmarshal(body, &env)
			if resp.StatusCode != 500 || env.Error.Type != "InternalServerError" || env.Error.Code != 500 ||
				!strings.Contains(env.Error.Message, tc.want) {
				t.Errorf("decode: %d %s; want 500 InternalServerError mentioning %q", resp.StatusCode, body, tc.want)
			}
			if got := p.Stats().BlocksRead; got != readBefore {
				t.Errorf("producer blocks read moved from %d to %d", readBefore, got)
			}
			if s := d.Stats(); s.KVLoadFailures != 1 || s.KVLoads != 0 {
				t.Errorf("consumer: %+v", s)
			}
		})
	}
}

func kvMap(t *testing.T, kv json.RawMessage) map[string]json.RawMessage {
	t.Helper()
	var m map[string]json.RawMessage
	if err := json.Unmarshal(kv, &m); err != nil {
		t.Fatal(err)
	}
	return m
}

func TestKVLoadFailureRecompute(t *testing.T) {
	t.Parallel()
	const ttft, perToken = 20 * time.Millisecond, 5 * time.Millisecond
	d := startEngine(t, Options{KVLoadFailure: KVLoadRecompute, TTFT: ttft, PrefillPerToken: perToken, Tokens: 2})
	// decode-request.json names a producer nobody runs: the load fails and the
	// decode recomputes the 6-word prompt.
	fixture := kvMap(t, readFixture(t, "decode-request.json"))
	fixture["model"] = json.RawMessage(`"sim-model"`)
	body, _ := json.Marshal(fixture)
	req := strings.Replace(string(body), `"remote_host":"10.0.0.5"`, `"remote_host":"127.0.0.1"`, 1)
	start := time.Now()
	code, _, resp := post(t, d.URL(), "/v1/completions", strings.Replace(req, `"remote_port":5600`, `"remote_port":1`, 1))
	took := time.Since(start)
	ev := sseData(t, resp)
	if code != 200 || len(ev) != 4 || ev[3] != "[DONE]" {
		t.Fatalf("recomputed decode: %d %q", code, ev)
	}
	if took < ttft+6*perToken {
		t.Errorf("recomputed decode took %v, want at least ttft + 6 × prefill-per-token", took)
	}
	if s := d.Stats(); s.KVLoadFailures != 1 || s.KVLoads != 0 {
		t.Errorf("stats %+v", s)
	}
}

func TestHandoffNonStreamingAndEmptyBlocks(t *testing.T) {
	t.Parallel()
	p := startEngine(t, Options{Role: RolePrefill})
	d := startEngine(t, Options{Role: RoleDecode, Tokens: 2})
	_, _, body := post(t, p.URL(), "/v1/chat/completions", chatPrefillBody("hello there"))
	kv := descriptorOf(t, body)
	code, _, body := post(t, d.URL(), "/v1/chat/completions",
		withKV(t, `{"messages":[{"role":"user","content":"hello there"}]}`, kv))
	if code != 200 || !strings.Contains(string(body), `"content":" alpha beta"`) ||
		!strings.Contains(string(body), `"kv_transfer_params":null}`) {
		t.Errorf("non-streaming decode: %d %s", code, body)
	}
	if s := p.Stats(); s.BlocksRead != 1 || s.BlocksPinned != 0 {
		t.Errorf("producer %+v", s)
	}
	// vLLM reads nothing for an empty remote_block_ids (a full local prefix hit).
	m := kvMap(t, kv)
	m["remote_block_ids"] = json.RawMessage(`[]`)
	empty, _ := json.Marshal(m)
	if code, _, body := post(t, d.URL(), "/v1/completions", withKV(t, completions("x"), empty)); code != 200 {
		t.Errorf("empty remote_block_ids: %d %s", code, body)
	}
	if s := d.Stats(); s.KVLoads != 1 || s.KVLoadFailures != 0 {
		t.Errorf("consumer %+v", s)
	}
}

func TestLeaseExpiryAndRestartCounts(t *testing.T) {
	t.Parallel()
	p := startEngine(t, Options{KVLease: 30 * time.Millisecond})
	post(t, p.URL(), "/v1/completions", prefillBody(fortyWords)) // 3 blocks
	if s := p.Stats(); s.BlocksPinned != 3 {
		t.Fatalf("pinned %d", s.BlocksPinned)
	}
	eventually(t, 5*time.Second, "the 30 ms lease runs out", func() bool { return p.Stats().BlocksExpired > 0 })
	if s := p.Stats(); s.BlocksPinned != 0 || s.BlocksExpired != 3 {
		t.Errorf("after the lease: %+v", s)
	}

	old := p.EngineID()
	post(t, p.URL(), "/v1/completions", prefillBody("a b")) // 1 block
	code, _, body := post(t, p.URL(), "/sim/restart", "")
	var info EngineInfo
	_ = json.Unmarshal(body, &info)
	if code != 200 || info.EngineID == old || info.EngineID != p.EngineID() {
		t.Errorf("restart: %d %s (old id %s)", code, body, old)
	}
	if s := p.Stats(); s.BlocksPinned != 0 || s.BlocksDropped != 1 || s.Restarts != 1 {
		t.Errorf("after restart: %+v", s)
	}
}

func TestLatencyModel(t *testing.T) {
	t.Parallel()
	// Delays large against a loaded 2-core machine's scheduling noise, so that "at once" and
	// "about" can be told apart from a delay counted twice.
	const ttft, perToken, itl = 400 * time.Millisecond, 2 * time.Millisecond, 10 * time.Millisecond
	e := startEngine(t, Options{TTFT: ttft, PrefillPerToken: perToken, ITL: itl, Tokens: 5})
	// A decode without transfer parameters computes its 10-token prompt itself.
	w := exchange(t, e.URL(), request("/v1/completions", completionsStream("a b c d e f g h i j")), 3*time.Second, false)
	if w.first > ttft/2 {
		t.Errorf("headers after %v: a stream's headers go out at once, before the first token", w.first)
	}
	start := time.Now()
	code, _, _ := post(t, e.URL(), "/v1/completions", completionsStream("a b c d e f g h i j"))
	want := ttft + 10*perToken + 4*itl
	if took := time.Since(start); code != 200 || took < want || took > want+300*time.Millisecond {
		t.Errorf("stream took %v, want about ttft + 10 × prefill-per-token + 4 × itl = %v", took, want)
	}
	start = time.Now()
	code, _, _ = post(t, e.URL(), "/v1/completions", completions("a b c d e f g h i j"))
	if took := time.Since(start); code != 200 || took < want {
		t.Errorf("non-streaming response took %v, want at least %v", took, want)
	}
}
