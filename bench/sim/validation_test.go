package sim

import (
	"fmt"
	"strings"
	"testing"

	json "github.com/goccy/go-json"

	"github.com/narwhal-router/narwhal/bench/sim/tokenizer"
)

// The simulator rejects what vLLM rejects, with vLLM's envelope, status, type and param.
func TestRequestValidation(t *testing.T) {
	t.Parallel()
	e := startEngine(t, Options{Models: []string{"m1", "m2"}, MaxModelLen: 10})
	tests := []struct {
		name, path, body, contentType string
		code                          int
		typ, param, message           string
	}{
		{"invalid JSON", "/v1/completions", `{"prompt":`, "", 400, "Bad Request", "", "invalid JSON"},
		{"not an object", "/v1/completions", `[1,2]`, "", 400, "Bad Request", "", "invalid JSON"},
		{"wrong content type", "/v1/completions", `{"prompt":"x"}`, "text/plain", 400, "Bad Request", "", "Only 'application/json'"},
		{"missing prompt", "/v1/completions", `{"model":"m1"}`, "", 400, "Bad Request", "prompt", "Either prompt"},
		{"empty prompt", "/v1/completions", `{"model":"m1","prompt":""}`, "", 400, "Bad Request", "prompt", "Either prompt"},
		{"several prompts", "/v1/completions", `{"prompt":["a","b"]}`, "", 400, "BadRequestError", "prompt", "one prompt per request"},
		{"missing messages", "/v1/chat/completions", `{"model":"m1"}`, "", 400, "Bad Request", "messages", "Field required"},
		{"message without role", "/v1/chat/completions", `{"messages":[{"content":"x"}]}`, "", 400, "Bad Request", "messages", "role"},
		{"unknown model", "/v1/completions", `{"model":"nope","prompt":"x"}`, "", 404, "NotFoundError", "model", "The model `nope` does not exist."},
		{"n = 0", "/v1/chat/completions", `{"messages":[{"role":"user","content":"x"}],"n":0}`, "", 400, "BadRequestError", "n", "at least 1"},
		{"n too large", "/v1/completions", `{"prompt":"x","n":129}`, "", 400, "BadRequestError", "n", "at most 128"},
		{"n > 1 on a prefill leg", "/v1/completions", `{"prompt":"x","n":2,"kv_transfer_params":{"do_remote_decode":true}}`, "", 400, "BadRequestError", "n", "n=1 only"},
		{"stream_options without stream", "/v1/completions", `{"prompt":"x","stream_options":{"include_usage":true}}`, "", 400, "Bad Request", "stream_options", "stream=True"},
		{"negative logprobs", "/v1/completions", `{"prompt":"x","logprobs":-1}`, "", 400, "Bad Request", "logprobs", "positive"},
		{"too many logprobs", "/v1/completions", `{"prompt":"x","logprobs":21}`, "", 400, "BadRequestError", "logprobs", "max allowed: 20"},
		{"top_logprobs without logprobs", "/v1/chat/completions", `{"messages":[{"role":"user","content":"x"}],"top_logprobs":2}`, "", 400, "Bad Request", "top_logprobs", "must be set to true"},
		{"prompt too long", "/v1/completions", `{"prompt":"1 2 3 4 5 6 7 8 9 10"}`, "", 400, "BadRequestError", "input_tokens", "maximum context length is 10 tokens"},
		{"max_tokens too large", "/v1/completions", `{"prompt":"1 2 3","max_tokens":8}`, "", 400, "BadRequestError", "max_tokens", "too large: 8"},
		{"max_tokens zero", "/v1/completions", `{"prompt":"1","max_tokens":0}`, "", 400, "BadRequestError", "max_tokens", "at least 1"},
		{"streaming prefill leg", "/v1/completions", `{"prompt":"x","stream":true,"kv_transfer_params":{"do_remote_decode":true}}`, "", 400, "BadRequestError", "stream", "non-streaming only"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			ct := tc.contentType
			if ct == "" {
				ct = "application/json"
			}
			code, hdr, body := post(t, e.URL(), tc.path, tc.body, "Content-Type", ct)
			var env struct {
				Error struct {
					Message string  `json:"message"`
					Type    string  `json:"type"`
					Param   *string `json:"param"`
					Code    int     `json:"code"`
				} `json:"error"`
			}
			if err := json.Unmarshal(body, &env); err != nil {
				t.Fatalf("%d %s: %v", code, body, err)
			}
			param := ""
			if env.Error.Param != nil {
				param = *env.Error.Param
			}
			if code != tc.code || env.Error.Code != tc.code || env.Error.Type != tc.typ || param != tc.param ||
				!strings.Contains(env.Error.Message, tc.message) || hdr.Get("Content-Type") != "application/json" {
				t.Errorf("got %d %s; want %d type %q param %q message containing %q", code, body, tc.code, tc.typ,
					tc.param, tc.message)
			}
		})
	}
}

func TestRequestsVLLMAccepts(t *testing.T) {
	t.Parallel()
	e := startEngine(t, Options{Models: []string{"Qwen/Qwen3-0.6B", "alias"}, Tokens: 2})
	tests := []struct{ name, path, body, want string }{
		{"the router's prefill request", "/v1/completions", string(readFixture(t, "prefill-request.json")), `"finish_reason":"length"`},
		{"no model: the first served one", "/v1/completions", `{"prompt":"x"}`, `"model":"Qwen/Qwen3-0.6B"`},
		{"a second model", "/v1/completions", `{"model":"alias","prompt":"x"}`, `"model":"alias"`},
		{"prompt as a list of one string", "/v1/completions", `{"prompt":["a b c"]}`, `"prompt_tokens":3`},
		{"prompt as token ids", "/v1/completions", `{"prompt":[1,2,3,4]}`, `"prompt_tokens":4`},
		{"content parts", "/v1/chat/completions",
			`{"messages":[{"role":"system","content":"be brief"},{"role":"user","content":[{"type":"text","text":"a b"},{"type":"image_url","image_url":{"url":"x"}}]}]}`,
			fmt.Sprintf(`"prompt_tokens":%d`, tokenizer.Default().Count(tokenizer.ChatML([]tokenizer.Message{{Role: "system", Content: "be brief"}, {Role: "user", Content: "a b"}}, true)))},
		{"max_completion_tokens wins on chat", "/v1/chat/completions",
			`{"messages":[{"role":"user","content":"x"}],"max_tokens":2,"max_completion_tokens":1}`, `"completion_tokens":1`},
		{"stop when the model ends before max_tokens", "/v1/completions", `{"prompt":"x","max_tokens":5}`, `"finish_reason":"stop"`},
		{"include_usage defaults to true", "/v1/completions", `{"prompt":"x","stream":true,"stream_options":{}}`, `"choices":[],"usage"`},
		{"unknown fields are ignored", "/v1/completions", `{"prompt":"x","temperature":0.7,"whatever":{"a":1}}`, `"text":" alpha beta"`},
		{"n=1", "/v1/completions", `{"prompt":"x","n":1}`, `"text":" alpha beta"`},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			code, _, body := post(t, e.URL(), tc.path, tc.body)
			if code != 200 || !strings.Contains(string(body), tc.want) {
				t.Errorf("got %d %s, want 200 with %s", code, body, tc.want)
			}
		})
	}
}

func TestResponseIDs(t *testing.T) {
	t.Parallel()
	e := startEngine(t, Options{Tokens: 1})
	_, _, body := post(t, e.URL(), "/v1/chat/completions", `{"messages":[{"role":"user","content":"x"}]}`, "X-Request-Id", "req-7")
	if !strings.HasPrefix(string(body), `{"id":"chatcmpl-req-7","object":"chat.completion",`) {
		t.Errorf("chat id: %s", body)
	}
	_, _, body = post(t, e.URL(), "/v1/completions", `{"prompt":"x"}`)
	var resp struct{ ID string }
	_ = json.Unmarshal(body, &resp)
	if len(resp.ID) != len("cmpl-")+32 || !strings.HasPrefix(resp.ID, "cmpl-") {
		t.Errorf("random id %q, want cmpl-<32 hex> like vLLM's random_uuid", resp.ID)
	}
}
