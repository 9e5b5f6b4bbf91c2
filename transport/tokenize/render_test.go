package tokenize

import (
	"context"
	"io"
	"net/http"
	"net/http/httptest"
	"slices"
	"testing"
	"time"

	"github.com/narwhal-router/narwhal/config"
	"github.com/narwhal-router/narwhal/transport/blockkey"
	"github.com/narwhal-router/narwhal/transport/telemetry"
	"github.com/narwhal-router/narwhal/transport/wire"
)

func body(t *testing.T, ep wire.Endpoint, raw string) *wire.ClientBody {
	t.Helper()
	b, err := wire.ParseClientBody(ep, []byte(raw))
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// A render service as vLLM answers (or fails to): each case names the path it is asked on,
// what it answers, and what the router makes of it.
func TestRenderCallsVLLMsEndpointsAndFallsBackOnAnyFailure(t *testing.T) {
	type call struct{ path, body string }
	calls := make(chan call, 1)
	answers := map[string]func(w http.ResponseWriter, r *http.Request){}
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		b, _ := io.ReadAll(r.Body)
		calls <- call{r.URL.Path, string(b)}
		answers[r.URL.Path+"?"+r.URL.RawQuery](w, r)
	}))
	defer srv.Close()
	answer := func(status int, s string) func(http.ResponseWriter, *http.Request) {
		return func(w http.ResponseWriter, _ *http.Request) { w.WriteHeader(status); _, _ = io.WriteString(w, s) }
	}
	completion := `{"model":"m","prompt":"hello there","max_tokens":3,"cache_salt":"s"}`
	chatReq := `{"model":"m","messages":[{"role":"user","content":"hi"}]}`
	for _, c := range []struct {
		name, api string
		ep        wire.Endpoint
		req       string
		answer    func(http.ResponseWriter, *http.Request)
		wantPath  string
		wantBody  string
		want      []uint32
		reason    string
	}{
		{"completions render", config.RenderAPIRender, wire.EndpointCompletions, completion,
			answer(200, `[{"request_id":"cmpl-1","token_ids":[5,6,7],"features":null,"sampling_params":{"n":1}}]`),
			"/v1/completions/render", completion, []uint32{5, 6, 7}, ""},
		{"chat render", config.RenderAPIRender, wire.EndpointChat, chatReq,
			answer(200, `{"request_id":"chatcmpl-1","token_ids":[9,8]}`), "/v1/chat/completions/render", chatReq, []uint32{9, 8}, ""},
		{"tokenize a prompt", config.RenderAPITokens, wire.EndpointCompletions, completion,
			answer(200, `{"count":2,"max_model_len":4096,"tokens":[1,2],"token_strs":null}`),
			"/tokenize", `{"model":"m","prompt":"hello there"}`, []uint32{1, 2}, ""},
		{"tokenize messages", config.RenderAPITokens, wire.EndpointChat, chatReq,
			answer(200, `{"count":1,"max_model_len":4096,"tokens":[3]}`),
			"/tokenize", `{"messages":[{"role":"user","content":"hi"}],"model":"m"}`, []uint32{3}, ""},
		{"a 500", config.RenderAPIRender, wire.EndpointCompletions, completion, answer(500, `{}`), "/v1/completions/render", completion, nil, "status"},
		{"not a render answer", config.RenderAPIRender, wire.EndpointCompletions, completion, answer(200, `{"token_ids":[1]}`),
			"/v1/completions/render", completion, nil, "decode"},
		{"a hang", config.RenderAPIRender, wire.EndpointChat, chatReq,
			func(w http.ResponseWriter, r *http.Request) { <-r.Context().Done() }, "/v1/chat/completions/render", chatReq, nil, "timeout"},
	} {
		t.Run(c.name, func(t *testing.T) {
			answers[c.wantPath+"?"] = c.answer
			tk, err := New(config.Tokens{Default: config.TokenSource{Source: config.TokensRender, BlockSize: 1, RenderAPI: c.api},
				RenderTimeoutS: 0.2}, telemetry.Noop())
			if err != nil {
				t.Fatal(err)
			}
			defer tk.Close()
			start := time.Now()
			ids, rerr := tk.tokens(context.Background(), tk.cfg.Default, body(t, c.ep, c.req), func() string { return srv.URL })
			if d := time.Since(start); d > 2*time.Second {
				t.Fatalf("the call took %v, past its timeout", d)
			}
			got := <-calls
			if got.path != c.wantPath || got.body != c.wantBody {
				t.Fatalf("asked %s %s, want %s %s", got.path, got.body, c.wantPath, c.wantBody)
			}
			if reason := ""; rerr != nil {
				reason = rerr.reason
				if reason != c.reason {
					t.Fatalf("failed as %q (%v), want %q", reason, rerr, c.reason)
				}
			} else if c.reason != "" || !slices.Equal(ids, c.want) {
				t.Fatalf("ids %v, want %v (failure %q)", ids, c.want, c.reason)
			}
		})
	}
}

// What needs no call: a token-id prompt is its own tokens; a Responses request and a model
// without an engine fall back; the estimate source gives nothing; the salt and an adapter's
// name enter the keys.
func TestPromptKeysWithoutACall(t *testing.T) {
	tk, err := New(config.Tokens{Default: config.TokenSource{Source: config.TokensRender, BlockSize: 2, RenderAPI: config.RenderAPIRender},
		RenderTimeoutS: 0.2, Models: []config.ModelTokens{{Name: "lora", Adapter: true}, {Name: "words", Tokens: config.TokenSource{Source: config.TokensEstimate}}}},
		telemetry.Noop())
	if err != nil {
		t.Fatal(err)
	}
	noEngine := func() string { return "" }
	b, ok := tk.Prompt(context.Background(), body(t, wire.EndpointCompletions, `{"model":"m","prompt":[1,2,3,4,5]}`), noEngine)
	if !ok || b.Tokens != 5 || !slices.Equal(b.Keys, blockkey.Keys(nil, []uint32{1, 2, 3, 4}, 2, blockkey.Extra{})) {
		t.Fatalf("a token-id prompt: %+v %v", b, ok)
	}
	b, _ = tk.Prompt(context.Background(), body(t, wire.EndpointCompletions, `{"model":"lora","prompt":[[1,2],[3]],"cache_salt":"s"}`), noEngine)
	if want := blockkey.Keys(nil, []uint32{1, 2}, 2, blockkey.Extra{Adapter: "lora", Salt: "s"}); !slices.Equal(b.Keys, want) {
		t.Fatalf("an adapter's salted prompt: %v, want %v", b.Keys, want)
	}
	if _, ok := tk.Prompt(context.Background(), body(t, wire.EndpointCompletions, `{"model":"m","prompt":"text"}`), noEngine); ok {
		t.Fatal("a render with no engine gave tokens")
	}
	if _, ok := tk.Prompt(context.Background(), body(t, wire.EndpointCompletions, `{"model":"words","prompt":[1,2]}`), noEngine); ok {
		t.Fatal("source estimate gave tokens")
	}
	if _, rerr := tk.tokens(context.Background(), tk.cfg.Default, body(t, wire.EndpointResponses, `{"model":"m","input":"hi"}`),
		func() string { return "http://127.0.0.1:1" }); rerr == nil || rerr.reason != "unsupported" {
		t.Fatalf("a Responses request: %v", rerr)
	}
}
