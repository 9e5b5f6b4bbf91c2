package sim

import (
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"

	"github.com/narwhal-router/narwhal/bench/sim/tokenizer"
)

var eventLine = regexp.MustCompile(`(?m)^event: (\S+)$`)

func eventNames(body []byte) []string {
	var out []string
	for _, m := range eventLine.FindAllSubmatch(body, -1) {
		out = append(out, string(m[1]))
	}
	return out
}

// dataOnly drops the event: lines, leaving the data events streamSkeletons reads.
func dataOnly(body []byte) []byte { return eventHeader.ReplaceAll(body, nil) }

var eventHeader = regexp.MustCompile(`(?m)^event: \S+\n`)

func TestResponsesShapesMatchFixtures(t *testing.T) {
	t.Parallel()
	e := startEngine(t, Options{Models: []string{"Qwen/Qwen3-0.6B"}})
	tests := []struct{ body, fixture string }{
		{`{"model":"Qwen/Qwen3-0.6B","input":"Explain it","instructions":"Be brief","max_output_tokens":2,"stream":true}`, "responses-stream.sse"},
		{`{"model":"Qwen/Qwen3-0.6B","input":"Hi @sim:any.error_in_stream=500@1","stream":true}`, "responses-stream-error.sse"},
		{`{"model":"Qwen/Qwen3-0.6B","input":[{"role":"user","content":[{"type":"input_text","text":"Explain it"}]}]}`, "responses-response.json"},
	}
	for _, tc := range tests {
		t.Run(tc.fixture, func(t *testing.T) {
			code, _, body := post(t, e.URL(), "/v1/responses", tc.body, "X-Request-Id", "6f1c2d3e")
			want, err := os.ReadFile(filepath.Join("testdata", "responses", tc.fixture))
			if err != nil {
				t.Fatal(err)
			}
			if code != 200 {
				t.Fatalf("%d %s", code, body)
			}
			if !strings.HasSuffix(tc.fixture, ".sse") {
				if got, w := skeleton(t, body), skeleton(t, want); got != w {
					t.Fatalf("shape differs from %s\n got: %s\nwant: %s", tc.fixture, got, w)
				}
				return
			}
			if got, w := eventNames(body), eventNames(want); !slices.Equal(got, w) {
				t.Fatalf("events %q, want %q", got, w)
			}
			if got, w := streamSkeletons(t, dataOnly(body)), streamSkeletons(t, dataOnly(want)); !slices.Equal(got, w) {
				t.Fatalf("stream shape differs from %s\n got: %q\nwant: %q", tc.fixture, got, w)
			}
			if strings.Contains(string(body), "[DONE]") {
				t.Fatal("a Responses stream has no [DONE]")
			}
		})
	}
}

func TestResponsesPrefillLegCarriesTheDescriptor(t *testing.T) {
	t.Parallel()
	e := startEngine(t, Options{})
	code, _, body := post(t, e.URL(), "/v1/responses",
		`{"model":"sim-model","input":"one two three","max_output_tokens":1,"stream":false,"kv_transfer_params":{"do_remote_decode":true,"do_remote_prefill":false}}`)
	if code != 200 || !strings.Contains(string(body), `"status":"incomplete"`) || !strings.Contains(string(body), `"kv_transfer_params":{"do_remote_prefill":true`) {
		t.Fatalf("%d %s", code, body)
	}
	if s := e.Stats(); s.PrefillRequests != 1 || s.BlocksPinned == 0 {
		t.Fatalf("stats %+v", s)
	}
}

func TestPassthroughEndpointsAnswerInVLLMShapes(t *testing.T) {
	t.Parallel()
	e := startEngine(t, Options{})
	cases := []struct{ path, body, want string }{
		{"/v1/embeddings", `{"model":"sim-model","input":"a b"}`, `{"id":"embd-6f1c2d3e","object":"list","created":`},
		{"/v1/embeddings", `{"input":"a b","encoding_format":"base64"}`, `"embedding":"`},
		{"/tokenize", `{"prompt":"a b"}`, `{"count":2,"max_model_len":4096,"tokens":[`},
		{"/tokenize", `{"prompt":" alpha","return_token_strs":true}`, `"token_strs":["Ġalpha"]}`},
		{"/detokenize", `{"tokens":[` + ids(" alpha beta") + `]}`, `{"prompt":" alpha beta"}`},
		{"/v1/score", `{"text_1":"a","text_2":"a"}`, `"data":[{"index":0,"object":"score","score":1.0}]`},
		{"/v2/rerank", `{"query":"a","documents":["b","a"]}`, `"results":[{"index":1,`},
	}
	for _, tc := range cases {
		if code, _, body := post(t, e.URL(), tc.path, tc.body, "X-Request-Id", "6f1c2d3e"); code != 200 || !strings.Contains(string(body), tc.want) {
			t.Errorf("%s: %d %s, want %s", tc.path, code, body, tc.want)
		}
	}
	if code, _, body := post(t, e.URL(), "/v1/embeddings", `{"model":"other","input":"a"}`); code != 404 {
		t.Errorf("unknown model: %d %s", code, body)
	}
	if err := e.InjectFault("decode.status=503", 1); err != nil {
		t.Fatal(err)
	}
	if code, h, _ := post(t, e.URL(), "/tokenize", `{"prompt":"a"}`); code != 503 || h.Get("Retry-After") == "" {
		t.Errorf("injected 503: %d", code)
	}
}

func TestResponsesInputHitsThePrefixCache(t *testing.T) {
	t.Parallel()
	e := startEngine(t, Options{MaxNumSeqs: 4, BlockSize: 4, Tokens: 2})
	body := `{"input":[{"role":"user","content":"one two three four five six seven eight nine ten eleven twelve"}],"instructions":"be brief"}`
	var cached []string
	for range 2 {
		code, _, out := post(t, e.URL(), "/v1/responses", body)
		if code != 200 {
			t.Fatalf("%d %s", code, out)
		}
		m := regexp.MustCompile(`"cached_tokens":(\d+)`).FindSubmatch(out)
		if m == nil {
			t.Fatalf("no cached_tokens in %s", out)
		}
		cached = append(cached, string(m[1]))
	}
	n := tokenizer.Default().Count(tokenizer.ChatML([]tokenizer.Message{{Role: "system", Content: "be brief"},
		{Role: "user", Content: "one two three four five six seven eight nine ten eleven twelve"}}, true))
	if want := strconv.Itoa((n - 1) / 4 * 4); cached[0] != "0" || cached[1] != want {
		t.Fatalf("cached tokens %v, want 0 then %s (the full blocks of the %d-token rendered prompt)", cached, want, n)
	}
}

// ids is text's token ids as a JSON list's members.
func ids(text string) string {
	var parts []string
	for _, id := range tokenizer.Default().Encode(text) {
		parts = append(parts, fmt.Sprint(id))
	}
	return strings.Join(parts, ",")
}
