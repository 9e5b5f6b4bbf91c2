package tests

import (
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/narwhal-router/narwhal/bench/sim"
	"github.com/narwhal-router/narwhal/bench/sim/tokenizer"
	"github.com/narwhal-router/narwhal/config"
)

// runSDKScript runs a Node.js script of tests/sdk with args and returns what it printed; it skips
// the test when Node.js or the SDK package (a directory of tests/sdk/node_modules) is missing.
func runSDKScript(t *testing.T, pkg, script string, args ...string) []byte {
	t.Helper()
	node, err := exec.LookPath("node")
	if err != nil {
		t.Skip("node is not installed (Debian: apt-get install nodejs npm; .ci/run does it)")
	}
	if _, err := os.Stat(filepath.Join("sdk", "node_modules", pkg)); err != nil {
		t.Skipf("the %s SDK is not installed: make sdk-deps (make test runs it) or npm ci in tests/sdk", pkg)
	}
	cmd := exec.Command(node, append([]string{script}, args...)...)
	cmd.Dir = "sdk"
	out, err := cmd.Output()
	if err != nil {
		var stderr string
		if ee, ok := err.(*exec.ExitError); ok {
			stderr = string(ee.Stderr)
		}
		t.Fatalf("the SDK failed: %v\n%s", err, stderr)
	}
	return out
}

// sdkFailure is how tests/sdk/messages.mjs reports an error the SDK raised.
type sdkFailure struct {
	Name, Type, Message, RequestID string
	Status                         int
}

// TestOfficialAnthropicSDKTalksToNarwhal drives POST /v1/messages with the Anthropic TypeScript
// SDK on a disaggregated fleet (one producer, one consumer): a message with every sampling
// field, a stream through the SDK's stream helper and its final message, a tool use round trip
// (and the tool call streamed), engine faults before the first token (the mapped status and
// error class) and after it (the stream's error event), a refused field, an abort that must
// reach the engine, count_tokens without a tokenizer source, and a wrong x-api-key. Every
// request it made ran on both engines, with the KV blocks read.
func TestOfficialAnthropicSDKTalksToNarwhal(t *testing.T) {
	h := start(t, setup{prefill: 1, decode: 1, engine: sim.Options{Tokens: 4},
		config: func(c *config.Config) {
			c.Server.APIKeys = []string{"sdk-key"}
			c.Engine.FirstTokenTimeoutS = 0.5
			c.Recovery.EjectAfter = 1000 // the faults are the prompts', not the engines'
		}})
	outb := runSDKScript(t, "@anthropic-ai/sdk", "messages.mjs", h.base, "sdk-key")
	type usage struct {
		InputTokens, OutputTokens int  `json:"-"`
		Input                     int  `json:"input_tokens"`
		Output                    int  `json:"output_tokens"`
		CacheRead                 *int `json:"cache_read_input_tokens"`
	}
	var got struct {
		Message struct {
			Type, Role, Text, StopReason, RequestID, Header string
			Usage                                           usage
		}
		Stream struct {
			Text, FinalText, StopReason string
			Events                      []string
			Usage                       usage
		}
		Tools struct {
			StopReason, Name, AnswerText, AnswerStop string
			Input                                    map[string]string
		}
		ToolStream struct {
			Partial, StopReason string
			Input               map[string]string
		}
		Before503, Before504Stream, Refused, After, CountTokens, WrongKey sdkFailure
		Aborted                                                           bool
	}
	if err := json.Unmarshal(outb, &got); err != nil {
		t.Fatalf("SDK output %q: %v", outb, err)
	}
	var after struct{ After struct{ Text string } }
	_ = json.Unmarshal(outb, &after)

	m := got.Message
	if m.Type != "message" || m.Role != "assistant" || m.Text != expectedText(3) || m.StopReason != "max_tokens" ||
		m.Usage.Output != 3 || m.Usage.Input == 0 || m.Usage.CacheRead == nil {
		t.Errorf("message: %+v", m)
	}
	if m.RequestID == "" || m.RequestID != m.Header {
		t.Errorf("the SDK's request id %q, want the x-request-id %q", m.RequestID, m.Header)
	}
	s := got.Stream
	wantEvents := "message_start content_block_start content_block_delta content_block_delta content_block_delta " +
		"content_block_delta content_block_stop message_delta message_stop"
	if s.Text != expectedText(4) || s.FinalText != s.Text || s.StopReason != "max_tokens" || s.Usage.Output != 4 ||
		s.Usage.Input == 0 || strings.Join(s.Events, " ") != wantEvents {
		t.Errorf("stream: %+v\nwant events %s", s, wantEvents)
	}
	if tl := got.Tools; tl.StopReason != "tool_use" || tl.Name != "get_weather" || tl.Input["city"] != "Oslo" || tl.AnswerText == "" {
		t.Errorf("tool use round trip: %+v", tl)
	}
	if ts := got.ToolStream; ts.Partial != `{"city": "Oslo"}` || ts.Input["city"] != "Oslo" || ts.StopReason != "tool_use" {
		t.Errorf("streamed tool use: %+v", ts)
	}
	for name, c := range map[string]struct {
		got          sdkFailure
		class, typ   string
		status       int
		messageHolds string
	}{
		"503 before the first token":          {got.Before503, "ServiceUnavailableError", "overloaded_error", 503, "overloaded"},
		"504 before the first token (stream)": {got.Before504Stream, "GatewayTimeoutError", "timeout_error", 504, "no token from the decode engine"},
		"thinking refused":                    {got.Refused, "BadRequestError", "invalid_request_error", 400, "thinking"},
		"error after the first token":         {got.After, "APIError", "api_error", 0, "closed before [DONE]"},
		"count_tokens":                        {got.CountTokens, "NotImplementedError", "api_error", 501, "no tokenizer source"},
		"wrong x-api-key":                     {got.WrongKey, "AuthenticationError", "authentication_error", 401, "incorrect API key"},
	} {
		if c.got.Name != c.class || c.got.Type != c.typ || c.got.Status != c.status || !strings.Contains(c.got.Message, c.messageHolds) {
			t.Errorf("%s: the SDK raised %+v, want %s %d of type %s (message with %q)", name, c.got, c.class, c.status, c.typ, c.messageHolds)
		}
	}
	if after.After.Text != expectedText(2) {
		t.Errorf("error after the first token: the SDK delivered %q before it, want %q", after.After.Text, expectedText(2))
	}
	if !got.Aborted {
		t.Error("the SDK did not report its abort")
	}
	consumer, producer := h.fleet.Engines[1], h.fleet.Engines[0]
	if consumer.Stats().Role == sim.RolePrefill {
		consumer, producer = producer, consumer
	}
	eventually(t, 5*time.Second, func() bool { return consumer.Stats().Aborted >= 1 },
		func() string { return "the abort did not reach the decode engine" })
	if producer.Stats().BlocksRead == 0 {
		t.Error("the consumer read no KV block from the producer")
	}
	for _, l := range h.accessLines() {
		if l["endpoint"] != "messages" {
			t.Errorf("access log endpoint %v, want messages: %v", l["endpoint"], l)
		}
		if l["status"] == float64(200) && (l["producer"] == nil || l["consumer"] == nil) {
			t.Errorf("a Messages request did not run disaggregated: %v", l)
		}
	}
}

// anthropicError is Anthropic's error body.
type anthropicError struct {
	Type  string
	Error struct{ Type, Message string }
}

// TestMessagesFailuresBeforeTheFirstTokenInAnthropicShape: a fault before the first token is
// answered with the status chat would get, in Anthropic's error shape, streaming or not; keys are
// taken from x-api-key or Authorization alike.
func TestMessagesFailuresBeforeTheFirstTokenInAnthropicShape(t *testing.T) {
	h := mappingHarness(t, func(c *config.Config) { c.Server.APIKeys = []string{"k"} })
	cases := []struct {
		prompt      string
		status      int
		typ, saying string
	}{
		{"@sim:prefill.hang_headers", 504, "timeout_error", "prefill engine did not answer within"},
		{"@sim:decode.hang_first_token", 504, "timeout_error", "no token from the decode engine within"},
		{"@sim:decode.refuse", 502, "api_error", "could not reach the engine"},
		{"@sim:decode.status=503", 503, "overloaded_error", "engine is overloaded (503)"},
		{"@sim:decode.status=400", 400, "invalid_request_error", "Bad Request (simulated fault)"},
	}
	for _, tc := range cases {
		for _, stream := range []bool{false, true} {
			body := fmt.Sprintf(`{"model":"sim-model","max_tokens":4,"stream":%v,"messages":[{"role":"user","content":"hi %s"}]}`, stream, tc.prompt)
			resp, b := h.post("/v1/messages", body, "x-api-key", "k", "anthropic-version", "2023-06-01")
			var e anthropicError
			if err := json.Unmarshal(b, &e); err != nil || resp.StatusCode != tc.status || e.Type != "error" ||
				e.Error.Type != tc.typ || !strings.Contains(e.Error.Message, tc.saying) {
				t.Errorf("%s (stream %v): %d %s, want %d %s saying %q", tc.prompt, stream, resp.StatusCode, b, tc.status, tc.typ, tc.saying)
			}
			if resp.Header.Get("request-id") == "" || resp.Header.Get("request-id") != resp.Header.Get("x-request-id") {
				t.Errorf("%s: request-id %q, x-request-id %q", tc.prompt, resp.Header.Get("request-id"), resp.Header.Get("x-request-id"))
			}
		}
	}
	for _, tc := range []struct {
		name, body string
		headers    []string
		status     int
		typ        string
	}{
		{"bearer key", `{"model":"sim-model","max_tokens":2,"messages":[{"role":"user","content":"hi"}]}`, []string{"Authorization", "Bearer k"}, 200, ""},
		{"no key", `{"model":"sim-model","max_tokens":2,"messages":[{"role":"user","content":"hi"}]}`, nil, 401, "authentication_error"},
		{"unknown model", `{"model":"other","max_tokens":2,"messages":[{"role":"user","content":"hi"}]}`, []string{"x-api-key", "k"}, 404, "not_found_error"},
		{"not JSON", `{`, []string{"x-api-key", "k"}, 400, "invalid_request_error"},
		{"over server.max_body_bytes", `{"model":"sim-model","max_tokens":2,"messages":[{"role":"user","content":"` + strings.Repeat("x", 9<<20) + `"}]}`,
			[]string{"x-api-key", "k"}, 413, "request_too_large"},
	} {
		resp, b := h.post("/v1/messages", tc.body, tc.headers...)
		var e anthropicError
		_ = json.Unmarshal(b, &e)
		if resp.StatusCode != tc.status || e.Error.Type != tc.typ {
			t.Errorf("%s: %d %s, want %d %q", tc.name, resp.StatusCode, b, tc.status, tc.typ)
		}
	}
}

// TestMessagesKeyLimitIsTheSameForXAPIKey: server.api_key_max_concurrency counts a key sent as
// x-api-key with the same key sent as a bearer token; the 429 is in Anthropic's shape.
func TestMessagesKeyLimitIsTheSameForXAPIKey(t *testing.T) {
	h := start(t, setup{prefill: 1, decode: 1, engine: sim.Options{Tokens: 4}, config: func(c *config.Config) {
		c.Server.APIKeys = []string{"k"}
		c.Server.APIKeyMaxConcurrency = 1
	}})
	_, held, cancel := h.startRequest("/v1/chat/completions",
		`{"model":"sim-model","stream":true,"messages":[{"role":"user","content":"@sim:decode.silence_after=1"}]}`, "Authorization", "Bearer k")
	if r := <-held; r == nil || r.StatusCode != 200 {
		t.Fatalf("the held request: %v", r)
	}
	resp, b := h.post("/v1/messages", `{"model":"sim-model","max_tokens":2,"messages":[{"role":"user","content":"hi"}]}`, "x-api-key", "k")
	var e anthropicError
	_ = json.Unmarshal(b, &e)
	if resp.StatusCode != 429 || e.Error.Type != "rate_limit_error" || resp.Header.Get("Retry-After") == "" {
		t.Errorf("second request on the key: %d %s (Retry-After %q), want a 429 rate_limit_error", resp.StatusCode, b, resp.Header.Get("Retry-After"))
	}
	cancel()
}

// TestMessagesRunDisaggregatedLikeTheSameChatRequest: under the auto policy, a long Messages
// request and the same chat request, each on a fresh fleet, get the same decision
// (disaggregated, long_prompt), the same prompt at the engines, and the same KV handoff; the
// metrics count the Messages request under its own endpoint.
func TestMessagesRunDisaggregatedLikeTheSameChatRequest(t *testing.T) {
	prompt := strings.Repeat("The quick brown fox jumps over the lazy dog. ", 40)
	var lines []map[string]any
	var read []int64
	for _, r := range []struct{ path, body string }{
		{"/v1/chat/completions", `{"model":"sim-model","max_tokens":4,"messages":[{"role":"system","content":"be brief"},{"role":"user","content":"` + prompt + `"}]}`},
		{"/v1/messages", `{"model":"sim-model","max_tokens":4,"system":"be brief","messages":[{"role":"user","content":"` + prompt + `"}]}`},
	} {
		h := start(t, setup{prefill: 1, decode: 1, engine: sim.Options{Tokens: 4},
			config: func(c *config.Config) { c.Disaggregation.Policy = config.DisaggAuto }})
		producer := h.fleet.Engines[0]
		if producer.Stats().Role != sim.RolePrefill {
			producer = h.fleet.Engines[1]
		}
		if resp, b := h.post(r.path, r.body); resp.StatusCode != 200 {
			t.Fatalf("%s: %d %s", r.path, resp.StatusCode, b)
		}
		read = append(read, producer.Stats().BlocksRead)
		lines = append(lines, h.accessLines()...)
		if r.path == "/v1/messages" { // the metrics name the endpoint too
			var scrape string
			eventually(t, 3*time.Second, func() bool {
				scrape = h.scrape()
				return strings.Contains(scrape, `narwhal_requests_total{endpoint="messages",model="sim-model",outcome="success",status="200"} 1`) &&
					strings.Contains(scrape, `narwhal_handoff_age_seconds_count{endpoint="messages"} 1`)
			}, func() string { return "no messages request in the metrics:\n" + grep(scrape, `endpoint="messages"`) })
		}
	}
	if len(lines) != 2 {
		t.Fatalf("access log lines %v", lines)
	}
	chat, msgs := lines[0], lines[1]
	if chat["endpoint"] != "chat" || msgs["endpoint"] != "messages" {
		t.Fatalf("endpoints %v, %v", chat["endpoint"], msgs["endpoint"])
	}
	for _, k := range []string{"disaggregation", "disaggregation_reason", "prompt_tokens", "output_tokens"} {
		if chat[k] != msgs[k] {
			t.Errorf("%s: chat %v, messages %v", k, chat[k], msgs[k])
		}
	}
	if msgs["disaggregation_reason"] != "long_prompt" || msgs["producer"] == nil || read[0] == 0 || read[0] != read[1] {
		t.Errorf("messages ran %v (%v) on producer %v; KV blocks read: chat %d, messages %d", msgs["disaggregation"],
			msgs["disaggregation_reason"], msgs["producer"], read[0], read[1])
	}
}

// messagesUsage reads the usage of a Messages answer: the message's, or a stream's
// message_delta's.
func messagesUsage(t *testing.T, body []byte) (input, cacheRead, output int) {
	t.Helper()
	var u struct {
		Usage struct {
			Input     int `json:"input_tokens"`
			CacheRead int `json:"cache_read_input_tokens"`
			Output    int `json:"output_tokens"`
		}
	}
	data := body
	if i := strings.Index(string(body), "event: message_delta\ndata: "); i >= 0 {
		data = body[i+len("event: message_delta\ndata: "):]
		data = data[:strings.IndexByte(string(data), '\n')]
	}
	if err := json.Unmarshal(data, &u); err != nil {
		t.Fatalf("usage of %s: %v", tail(body), err)
	}
	return u.Usage.Input, u.Usage.CacheRead, u.Usage.Output
}

// TestMessagesCacheReadIsTheProducersHits: cache_read_input_tokens is the router's corrected
// count (the producer's own prefix-cache hits, not the transferred prompt the consumer reports
// as cached), and input_tokens the rest of the prompt, streaming or not.
func TestMessagesCacheReadIsTheProducersHits(t *testing.T) {
	eng := sim.Options{Tokens: 2, MaxNumSeqs: 8, PromptTokensDetails: true}
	for _, stream := range []bool{false, true} {
		t.Run(fmt.Sprintf("stream=%v", stream), func(t *testing.T) {
			h := start(t, setup{prefill: 1, decode: 1, engine: eng, config: policy(config.DisaggAlways, 100)})
			prompt := words("m", 400)
			body := fmt.Sprintf(`{"model":"sim-model","max_tokens":2,"stream":%t,"messages":[{"role":"user","content":%s}]}`, stream, jsonString(prompt))
			n := tokenizer.Default().Count(tokenizer.ChatML([]tokenizer.Message{{Role: "user", Content: prompt}}, true))
			for i, wantCached := range []int{0, (n - 1) / 16 * 16} {
				r := h.send("/v1/messages", body)
				if r.status != 200 {
					t.Fatalf("status %d: %s", r.status, r.body)
				}
				input, cached, output := messagesUsage(t, r.body)
				if cached != wantCached || input+cached != n || output != 2 {
					t.Errorf("request %d: input_tokens %d, cache_read_input_tokens %d, output_tokens %d; want %d cached of %d, 2 out",
						i+1, input, cached, output, wantCached, n)
				}
			}
			if st := h.simEngine("d0").Stats(); st.KVLoads != 2 {
				t.Fatalf("%d KV loads, want 2: the requests did not take the prefill/decode path", st.KVLoads)
			}
		})
	}
}

// TestMessagesTraceNamesItsRouteAndEndpoint: a Messages request's trace is rooted at
// "POST /v1/messages", labelled endpoint messages, with both legs under its attempt.
func TestMessagesTraceNamesItsRouteAndEndpoint(t *testing.T) {
	recv, endpoint := startOTLPReceiver(t, config.TracingHTTP, "")
	h := start(t, setup{prefill: 1, decode: 1, engine: sim.Options{Tokens: 2}, config: tracing(config.TracingHTTP, endpoint, 1)})
	r := h.send("/v1/messages", `{"model":"sim-model","max_tokens":2,"stream":true,"messages":[{"role":"user","content":"`+longPrompt+`"}]}`)
	if r.status != 200 {
		t.Fatalf("%d %s", r.status, r.body)
	}
	if err := h.shutdown(); err != nil { // flushes the spans
		t.Fatal(err)
	}
	spans := recv.requestTrace(t, r.id)
	want := `POST /v1/messages http.response.status_code=200 http.route=/v1/messages narwhal.endpoint=messages
  attempt
    prefill narwhal.engine=p0
    handoff narwhal.engine=p0
    decode narwhal.engine=d0 @first_token
`
	if got := tree(spans, "narwhal.engine", "http.response.status_code", "http.route", "narwhal.endpoint"); got != want {
		t.Errorf("span tree:\n%s\nwant\n%s", got, want)
	}
}
