package wire

import (
	"bytes"
	"errors"
	"io"
	"strings"
	"testing"

	"github.com/goccy/go-json"
)

// sameJSON reports whether two JSON texts hold the same value.
func sameJSON(t *testing.T, got, want []byte) bool {
	t.Helper()
	var g, w any
	if err := json.Unmarshal(got, &g); err != nil {
		t.Fatalf("%s: %v", got, err)
	}
	if err := json.Unmarshal(want, &w); err != nil {
		t.Fatalf("want %s: %v", want, err)
	}
	gb, _ := json.Marshal(g)
	wb, _ := json.Marshal(w)
	return bytes.Equal(gb, wb)
}

// The field table: each Messages request maps to the chat request vLLM's Messages handler builds
// from it (vllm/entrypoints/anthropic/serving.py), with metadata.user_id as chat's user.
func TestTranslateMessagesFieldTable(t *testing.T) {
	cases := []struct{ name, in, want string }{
		{"sampling fields and a string system",
			`{"model":"m","max_tokens":16,"system":"be brief","messages":[{"role":"user","content":"hi"}],
			  "temperature":0.2,"top_p":0.9,"top_k":40,"stop_sequences":["###","END"],"stream":true,"metadata":{"user_id":"u-7"}}`,
			`{"model":"m","messages":[{"role":"system","content":"be brief"},{"role":"user","content":"hi"}],"max_tokens":16,
			  "stop":["###","END"],"temperature":0.2,"top_p":0.9,"top_k":40,"stream":true,"user":"u-7"}`},
		{"system blocks joined, one text block a string, several a part list",
			`{"model":"m","max_tokens":1,"system":[{"type":"text","text":"a"},{"type":"text","text":"b","cache_control":{"type":"ephemeral"}}],
			  "messages":[{"role":"user","content":[{"type":"text","text":"one"}]},
			              {"role":"assistant","content":[{"type":"text","text":"x"},{"type":"text","text":"y"}]}]}`,
			`{"model":"m","messages":[{"role":"system","content":"ab"},{"role":"user","content":"one"},
			  {"role":"assistant","content":[{"type":"text","text":"x"},{"type":"text","text":"y"}]}],"max_tokens":1}`},
		{"tool use round trip",
			`{"model":"m","max_tokens":8,"tools":[{"name":"get_weather","description":"w","input_schema":{"type":"object"}}],
			  "messages":[{"role":"user","content":"weather?"},
			    {"role":"assistant","content":[{"type":"thinking","thinking":"hmm","signature":"s"},{"type":"tool_use","id":"t1","name":"get_weather","input":{"city": "Oslo"}}]},
			    {"role":"user","content":[{"type":"tool_result","tool_use_id":"t1","content":[{"type":"text","text":"sun"},{"type":"text","text":"warm"}]},{"type":"text","text":"thanks"}]}]}`,
			`{"model":"m","messages":[{"role":"user","content":"weather?"},
			    {"role":"assistant","reasoning":"hmm","tool_calls":[{"id":"t1","type":"function","function":{"name":"get_weather","arguments":"{\"city\":\"Oslo\"}"}}]},
			    {"role":"tool","content":"sun\nwarm","tool_call_id":"t1"},{"role":"user","content":"thanks"}],
			  "max_tokens":8,"tools":[{"type":"function","function":{"name":"get_weather","description":"w","parameters":{"type":"object"}}}],"tool_choice":"auto"}`},
		{"a user message of tool results only adds no user message",
			`{"model":"m","max_tokens":1,"messages":[{"role":"user","content":[{"type":"tool_result","tool_use_id":"t1","content":"42"}]}]}`,
			`{"model":"m","messages":[{"role":"tool","content":"42","tool_call_id":"t1"}],"max_tokens":1}`},
		{"tool_choice any is required",
			`{"model":"m","max_tokens":1,"messages":[{"role":"user","content":"x"}],"tools":[{"name":"f","input_schema":{}}],"tool_choice":{"type":"any"}}`,
			`{"model":"m","messages":[{"role":"user","content":"x"}],"max_tokens":1,"tools":[{"type":"function","function":{"name":"f","parameters":{}}}],"tool_choice":"required"}`},
		{"tool_choice tool names the function; disable_parallel_tool_use",
			`{"model":"m","max_tokens":1,"messages":[{"role":"user","content":"x"}],"tools":[{"name":"f","input_schema":{}}],
			  "tool_choice":{"type":"tool","name":"f","disable_parallel_tool_use":true}}`,
			`{"model":"m","messages":[{"role":"user","content":"x"}],"max_tokens":1,"tools":[{"type":"function","function":{"name":"f","parameters":{}}}],
			  "tool_choice":{"type":"function","function":{"name":"f"}},"parallel_tool_calls":false}`},
		{"tool_choice none; thinking disabled and the auto tier are the defaults",
			`{"model":"m","max_tokens":1,"messages":[{"role":"user","content":"x"}],"tools":[{"name":"f","input_schema":{}}],"tool_choice":{"type":"none"},"thinking":{"type":"disabled"},"service_tier":"auto"}`,
			`{"model":"m","messages":[{"role":"user","content":"x"}],"max_tokens":1,"tools":[{"type":"function","function":{"name":"f","parameters":{}}}],"tool_choice":"none"}`},
		{"output_config: a JSON schema format and effort",
			`{"model":"m","max_tokens":1,"messages":[{"role":"user","content":"x"}],"output_config":{"effort":"low","format":{"type":"json_schema","schema":{"type":"object"}}}}`,
			`{"model":"m","messages":[{"role":"user","content":"x"}],"max_tokens":1,"reasoning_effort":"low",
			  "response_format":{"type":"json_schema","json_schema":{"name":"json_schema","schema":{"type":"object"}}}}`},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			got, bad := translateMessages([]byte(tc.in))
			if bad != nil {
				t.Fatalf("refused: %v", bad)
			}
			if !sameJSON(t, got, []byte(tc.want)) {
				t.Fatalf("got  %s\nwant %s", got, tc.want)
			}
		})
	}
}

// What the engines cannot honour is a 400 naming the field, never dropped.
func TestTranslateMessagesRefusals(t *testing.T) {
	const msgs = `"messages":[{"role":"user","content":"x"}]`
	cases := []struct{ body, param, says string }{
		{`{"model":"m",` + msgs + `}`, "max_tokens", "max_tokens"},
		{`{"model":"m","max_tokens":0,` + msgs + `}`, "max_tokens", "positive"},
		{`{"max_tokens":1,` + msgs + `}`, "model", "model"},
		{`{"model":"m","max_tokens":1,"messages":[]}`, "messages", "non-empty"},
		{`{"model":"m","max_tokens":1,"thinking":{"type":"enabled","budget_tokens":1024},` + msgs + `}`, "thinking", "thinking"},
		{`{"model":"m","max_tokens":1,"service_tier":"priority",` + msgs + `}`, "service_tier", "tier"},
		{`{"model":"m","max_tokens":1,"kv_transfer_params":{},` + msgs + `}`, "kv_transfer_params", "router"},
		{`{"model":"m","max_tokens":1,"output_config":{"effort":"extreme"},` + msgs + `}`, "output_config.effort", "low, medium"},
		{`{"model":"m","max_tokens":1,"output_config":{"format":{"type":"json_schema"}},` + msgs + `}`, "output_config.format", "json_schema"},
		{`{"model":"m","max_tokens":1,"frequency_penalty":1,` + msgs + `}`, "frequency_penalty", "unknown"},
		{`{"model":"m","max_tokens":1,"metadata":{"tag":"x"},` + msgs + `}`, "metadata.tag", "user_id"},
		{`{"model":"m","max_tokens":1,"temperature":"hot",` + msgs + `}`, "temperature", "number"},
		{`{"model":"m","max_tokens":1,"stop_sequences":"###",` + msgs + `}`, "stop_sequences", "array"},
		{`{"model":"m","max_tokens":1,"system":[{"type":"image"}],` + msgs + `}`, "system", "text blocks"},
		{`{"model":"m","max_tokens":1,"messages":[{"role":"system","content":"x"}]}`, "messages", "role"},
		{`{"model":"m","max_tokens":1,"messages":[{"role":"user","content":[{"type":"image","source":{}}]}]}`, "messages", "image"},
		{`{"model":"m","max_tokens":1,"messages":[{"role":"user","content":[{"type":"tool_use","id":"a","name":"f","input":{}}]}]}`, "messages", "tool_use"},
		{`{"model":"m","max_tokens":1,"messages":[{"role":"user","content":[{"type":"tool_result","tool_use_id":"a","content":[{"type":"image"}]}]}]}`, "messages", "text blocks only"},
		{`{"model":"m","max_tokens":1,"tools":[{"type":"web_search_20250305","name":"web_search"}],` + msgs + `}`, "tools", "client tools only"},
		{`{"model":"m","max_tokens":1,"tools":[{"name":"f","input_schema":{},"strict":true}],` + msgs + `}`, "tools", "strict"},
		{`{"model":"m","max_tokens":1,"tool_choice":{"type":"any"},` + msgs + `}`, "tool_choice", "needs tools"},
		{`{"model":"m","max_tokens":1,"tools":[{"name":"f","input_schema":{}}],"tool_choice":{"type":"tool"},` + msgs + `}`, "tool_choice", "name"},
	}
	for _, tc := range cases {
		_, err := ParseClientBody(EndpointMessages, []byte(tc.body))
		var bre *BadRequestError
		if !errors.As(err, &bre) || bre.Param != tc.param || !strings.Contains(bre.Message, tc.says) {
			t.Errorf("%s: got %v, want a 400 on %s saying %q", tc.body, err, tc.param, tc.says)
		}
	}
}

// A translated body is a chat body on both legs: the engines' chat path, one output token and
// the connector's parameters on the prefill, the stream with usage on the decode.
func TestMessagesBodyRunsAsChatOnBothLegs(t *testing.T) {
	b, err := ParseClientBody(EndpointMessages, []byte(`{"model":"m","max_tokens":9,"messages":[{"role":"user","content":"hi"}]}`))
	if err != nil {
		t.Fatal(err)
	}
	if b.Endpoint.Path() != "/v1/chat/completions" || b.Endpoint.ClientPath() != "/v1/messages" || b.Endpoint.String() != "messages" || b.Stream {
		t.Fatalf("endpoint %s at %s (client %s), stream %v", b.Endpoint, b.Endpoint.Path(), b.Endpoint.ClientPath(), b.Stream)
	}
	if n, ok := b.OutputLimit(); !ok || n != 9 {
		t.Errorf("output limit %d %v, want 9", n, ok)
	}
	kv := []byte(`{"do_remote_decode":true}`)
	if got := b.AppendPrefillBody(nil, kv); !sameJSON(t, got, []byte(`{"model":"m","messages":[{"role":"user","content":"hi"}],"max_tokens":1,"stream":false,"kv_transfer_params":{"do_remote_decode":true}}`)) {
		t.Errorf("prefill body %s", got)
	}
	if got := b.AppendDecodeBody(nil, kv); !sameJSON(t, got, []byte(`{"model":"m","messages":[{"role":"user","content":"hi"}],"max_tokens":9,"stream":true,"stream_options":{"include_usage":true},"kv_transfer_params":{"do_remote_decode":true}}`)) {
		t.Errorf("decode body %s", got)
	}
	if p := b.Prompt(4); p.Words != 1 {
		t.Errorf("prompt estimate %+v, want the one word of the message", p)
	}
}

// translateStream runs a vLLM chat stream fixture through MessagesStream as the relay does.
func translateStream(t *testing.T, name string, cached int) string {
	t.Helper()
	evs, err := events(t, append(fixture(t, name), "\n\n"...), 4096)
	if !errors.Is(err, io.EOF) {
		t.Fatal(err)
	}
	s := NewMessagesStream()
	var out bytes.Buffer
	usage := Tokens{-1, -1, -1}
	for _, ev := range evs {
		data := EventData(ev)
		kind := Classify(data)
		if kind == EventUsage {
			usage, _ = TokensOf(data)
			usage.Cached = cached
		}
		out.Write(s.Event(kind, data, usage))
	}
	return out.String()
}

func TestMessagesStreamTranslatesVLLMChatStreams(t *testing.T) {
	ev := func(name, data string) string { return "event: " + name + "\ndata: " + data + "\n\n" }
	start := ev("message_start", `{"type":"message_start","message":{"id":"chatcmpl-6f1c2d3e-0000-4000-8000-000000000003","type":"message","role":"assistant","content":[],"model":"Qwen/Qwen3-0.6B","stop_reason":null,"stop_sequence":null,"usage":{"input_tokens":0,"output_tokens":0}}}`) +
		ev("ping", `{"type":"ping"}`)
	text := start +
		ev("content_block_start", `{"type":"content_block_start","index":0,"content_block":{"type":"text","text":""}}`) +
		ev("content_block_delta", `{"type":"content_block_delta","index":0,"delta":{"type":"text_delta","text":"Dis"}}`) +
		ev("content_block_delta", `{"type":"content_block_delta","index":0,"delta":{"type":"text_delta","text":"aggregated"}}`) +
		ev("content_block_delta", `{"type":"content_block_delta","index":0,"delta":{"type":"text_delta","text":" prefill"}}`) +
		ev("content_block_stop", `{"type":"content_block_stop","index":0}`) +
		// 812 prompt tokens of which the router's correction says 512 were cached
		ev("message_delta", `{"type":"message_delta","delta":{"stop_reason":"max_tokens","stop_sequence":null},"usage":{"input_tokens":300,"output_tokens":3,"cache_read_input_tokens":512}}`) +
		ev("message_stop", `{"type":"message_stop"}`)
	if got := translateStream(t, "chat-stream.sse", 512); got != text {
		t.Errorf("text stream:\n%s\nwant\n%s", got, text)
	}
	tool := strings.Replace(start, "chatcmpl-6f1c2d3e-0000-4000-8000-000000000003", "chatcmpl-77", 1) +
		ev("content_block_start", `{"type":"content_block_start","index":0,"content_block":{"type":"tool_use","id":"chatcmpl-tool-1f2e","name":"get_weather","input":{}}}`) +
		ev("content_block_delta", `{"type":"content_block_delta","index":0,"delta":{"type":"input_json_delta","partial_json":"{\"city\": "}}`) +
		ev("content_block_delta", `{"type":"content_block_delta","index":0,"delta":{"type":"input_json_delta","partial_json":"\"Oslo\"}"}}`) +
		ev("content_block_stop", `{"type":"content_block_stop","index":0}`) +
		// the fixture has no usage chunk: [DONE] closes the message with what is known
		ev("message_delta", `{"type":"message_delta","delta":{"stop_reason":"tool_use","stop_sequence":null},"usage":{"input_tokens":0,"output_tokens":0,"cache_read_input_tokens":0}}`) +
		ev("message_stop", `{"type":"message_stop"}`)
	if got := translateStream(t, "chat-stream-tool-call.sse", 0); got != tool {
		t.Errorf("tool stream:\n%s\nwant\n%s", got, tool)
	}
}

// Reasoning opens a thinking block, closed with a signature before the text block; a stop on a
// client's stop sequence is reported as one.
func TestMessagesStreamThinkingThenTextAndStopSequence(t *testing.T) {
	s := NewMessagesStream()
	var out bytes.Buffer
	for _, chunk := range []string{
		`{"id":"c","model":"m","choices":[{"index":0,"delta":{"role":"assistant","content":""}}]}`,
		`{"id":"c","model":"m","choices":[{"index":0,"delta":{"reasoning":"think"}}]}`,
		`{"id":"c","model":"m","choices":[{"index":0,"delta":{"content":"answer"},"finish_reason":"stop","stop_reason":"###"}]}`,
	} {
		out.Write(s.Event(Classify([]byte(chunk)), []byte(chunk), Tokens{-1, -1, -1}))
	}
	out.Write(s.Event(EventDone, doneData, Tokens{Prompt: 5, Completion: 2}))
	got := out.String()
	for _, want := range []string{
		`"index":0,"content_block":{"type":"thinking","thinking":""}`,
		`"index":0,"delta":{"type":"thinking_delta","thinking":"think"}`,
		`"index":0,"delta":{"type":"signature_delta","signature":"`,
		`{"type":"content_block_stop","index":0}`,
		`"index":1,"content_block":{"type":"text","text":""}`,
		`"delta":{"stop_reason":"stop_sequence","stop_sequence":"###"},"usage":{"input_tokens":5,"output_tokens":2,"cache_read_input_tokens":0}`,
	} {
		if !strings.Contains(got, want) {
			t.Errorf("stream lacks %s:\n%s", want, got)
		}
	}
}

// The non-streaming answer is assembled from the same chunks: tool_use with its input object.
func TestMessagesAnswerAssembledFromVLLMChatStream(t *testing.T) {
	evs, _ := events(t, append(fixture(t, "chat-stream-tool-call.sse"), "\n\n"...), 4096)
	a := NewAssembler(EndpointMessages)
	for _, ev := range evs {
		a.Add(EventData(ev))
	}
	got, err := a.Body()
	if err != nil {
		t.Fatal(err)
	}
	want := `{"id":"chatcmpl-77","type":"message","role":"assistant","content":[{"type":"tool_use","id":"chatcmpl-tool-1f2e","name":"get_weather","input":{"city":"Oslo"}}],
	  "model":"Qwen/Qwen3-0.6B","stop_reason":"tool_use","stop_sequence":null,"usage":{"input_tokens":0,"output_tokens":0,"cache_read_input_tokens":0}}`
	if !sameJSON(t, got, []byte(want)) {
		t.Errorf("got  %s\nwant %s", got, want)
	}
}

func TestMessagesErrorShapes(t *testing.T) {
	got := MessagesErrorBody(400, fixture(t, "error-response.json"))
	want := `{"type":"error","error":{"type":"invalid_request_error","message":"This model's maximum context length is 4096 tokens. However, you requested 5000 tokens."}}`
	if string(got) != want {
		t.Errorf("got %s\nwant %s", got, want)
	}
	for status, typ := range map[int]string{401: "authentication_error", 404: "not_found_error", 413: "request_too_large",
		429: "rate_limit_error", 502: "api_error", 503: "overloaded_error", 504: "timeout_error"} {
		if got := string(appendMessagesError(nil, status, "m")); !strings.Contains(got, `"type":"`+typ+`"`) {
			t.Errorf("%d: %s, want type %s", status, got, typ)
		}
	}
	// An engine's error event inside the stream keeps its status for the type.
	ev := AppendMessagesErrorEvent(nil, 502, []byte(`data: {"error":{"message":"boom","type":"x","code":503}}`+"\n\n"))
	if want := "event: error\ndata: {\"type\":\"error\",\"error\":{\"type\":\"overloaded_error\",\"message\":\"boom\"}}\n\n"; string(ev) != want {
		t.Errorf("error event %q, want %q", ev, want)
	}
}

// A text token costs the translation no allocation: the chunk is scanned in place and the text
// copied into the stream's reused buffer as the engine escaped it.
func TestMessagesStreamTokenAllocatesNothing(t *testing.T) {
	token := []byte(`{"id":"chatcmpl-1","object":"chat.completion.chunk","created":1,"model":"m","choices":[{"index":0,"delta":{"content":"Dis\"q\""},"logprobs":null,"finish_reason":null}]}`)
	s := NewMessagesStream()
	s.Event(EventToken, token, Tokens{})
	if got := string(s.Event(EventToken, token, Tokens{})); got != "event: content_block_delta\ndata: {\"type\":\"content_block_delta\",\"index\":0,\"delta\":{\"type\":\"text_delta\",\"text\":\"Dis\\\"q\\\"\"}}\n\n" {
		t.Fatalf("token event %q", got)
	}
	if raceEnabled {
		t.Skip("allocation budgets do not hold under the race detector (sync.Pool drops items at random)")
	}
	if n := testing.AllocsPerRun(200, func() { s.Event(EventToken, token, Tokens{}) }); n != 0 {
		t.Fatalf("%.0f allocations per token, want none", n)
	}
}

// FuzzMessages: whatever a client sends, the translation never panics and what it accepts is a
// chat body the chat validation takes; whatever an engine streams, the stream translation never
// panics and emits only well-formed events with JSON data.
func FuzzMessages(f *testing.F) {
	f.Add([]byte(`{"model":"m","max_tokens":4,"system":[{"type":"text","text":"s"}],"messages":[{"role":"user","content":[{"type":"text","text":"a\u00e9"}]}],"tools":[{"name":"f","input_schema":{}}],"tool_choice":{"type":"tool","name":"f"}}`),
		[]byte(`{"id":"c","model":"m","choices":[{"index":0,"delta":{"tool_calls":[{"index":0,"id":"t","function":{"name":"f","arguments":"{\""}}]}}]}`))
	f.Add([]byte(`{"model":"m","max_tokens":1,"messages":[{"role":"assistant","content":[{"type":"tool_use","id":"t","name":"f","input":{"a":[1,{"b":null}]}}]}]}`),
		[]byte(`{"id":1,"choices":[{"index":0,"delta":{"content":"x","reasoning":"\ud83d\ude00"},"finish_reason":"stop","stop_reason":"###"}],"usage":{}}`))
	f.Fuzz(func(t *testing.T, body, chunk []byte) {
		if chat, bad := translateMessages(body); bad == nil {
			if _, err := ParseClientBody(EndpointChat, chat); err != nil {
				t.Fatalf("%s translated to %s, which chat refuses: %v", body, chat, err)
			}
		}
		s := NewMessagesStream()
		for _, kind := range []EventKind{EventMeta, EventToken, EventUsage, EventToken, EventDone} {
			out := s.Event(kind, chunk, Tokens{Prompt: 3, Completion: 1, Cached: -1})
			for _, ev := range strings.Split(strings.TrimSuffix(string(out), "\n\n"), "\n\n") {
				if ev == "" {
					continue
				}
				name, data, ok := strings.Cut(ev, "\ndata: ")
				if !ok || !strings.HasPrefix(name, "event: ") || !json.Valid([]byte(data)) {
					t.Fatalf("chunk %s gave the event %q", chunk, ev)
				}
			}
		}
	})
}

func TestCountTokensBodyNeedsNoMaxTokens(t *testing.T) {
	for _, c := range []struct {
		in, bad string // bad: the field a refusal names ("" when accepted)
	}{
		{`{"model":"m","messages":[{"role":"user","content":"hi"}]}`, ""},
		{`{"model":"m","max_tokens":9,"messages":[{"role":"user","content":"hi"}]}`, ""},
		{`{"model":"m","max_tokens":0,"messages":[{"role":"user","content":"hi"}]}`, "max_tokens"},
		{`{"messages":[{"role":"user","content":"hi"}]}`, "model"},
		{`{}`, "model"},
		{`{"model":"m","messages":[{"role":"user","content":"hi"}],"thinking":{"type":"enabled","budget_tokens":1024}}`, "thinking"},
	} {
		b, err := ParseCountTokensBody([]byte(c.in))
		var bre *BadRequestError
		switch {
		case c.bad == "" && err != nil:
			t.Errorf("%s: %v", c.in, err)
		case c.bad == "" && (b.Model != "m" || b.Endpoint != EndpointMessages):
			t.Errorf("%s: model %q endpoint %v", c.in, b.Model, b.Endpoint)
		case c.bad != "" && (!errors.As(err, &bre) || bre.Param != c.bad):
			t.Errorf("%s: %v, want a refusal naming %s", c.in, err, c.bad)
		}
	}
}
