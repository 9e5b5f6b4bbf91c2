package sim

import (
	"fmt"
	"regexp"
	"strings"
	"testing"
)

// The render endpoints answer vLLM's GenerateRequest with the token ids generation uses.
func TestRenderEndpointsGiveTheTokensGenerationCounts(t *testing.T) {
	t.Parallel()
	e := startEngine(t, Options{})
	prompt := "The router renders before it places."
	code, _, body := post(t, e.URL(), "/v1/completions/render", `{"model":"sim-model","prompt":`+quote(prompt)+`,"max_tokens":5,"cache_salt":"s"}`, "X-Request-Id", "r1")
	want := `[{"request_id":"cmpl-r1","token_ids":[` + ids(prompt) + `],"features":null,"sampling_params":{"n":1,"max_tokens":5},` +
		`"model":"sim-model","stream":false,"stream_options":null,"cache_salt":"s","priority":0,"kv_transfer_params":null}]`
	if code != 200 || string(body) != want {
		t.Fatalf("completions render: %d %s\nwant %s", code, body, want)
	}
	msgs := `[{"role":"system","content":"Be brief."},{"role":"user","content":"Hi"}]`
	_, _, rendered := post(t, e.URL(), "/v1/chat/completions/render", `{"messages":`+msgs+`}`)
	_, _, tokenized := post(t, e.URL(), "/tokenize", `{"messages":`+msgs+`}`)
	_, _, served := post(t, e.URL(), "/v1/chat/completions", `{"messages":`+msgs+`}`)
	toks := regexp.MustCompile(`"tokens":(\[[0-9,]*\])`).FindSubmatch(tokenized)
	count := regexp.MustCompile(`"count":(\d+)`).FindSubmatch(tokenized)
	if toks == nil || !strings.Contains(string(rendered), `"token_ids":`+string(toks[1])) ||
		!strings.Contains(string(served), `"prompt_tokens":`+string(count[1])+`,`) {
		t.Fatalf("chat render %s, tokenize %s, generation %s: want the same tokens", rendered, tokenized, served)
	}
	if code, _, body := post(t, e.URL(), "/v1/chat/completions/render", `{"model":"nope","messages":`+msgs+`}`); code != 404 {
		t.Errorf("unknown model: %d %s", code, body)
	}
}

// cache_salt and a LoRA adapter enter the block hashes as vLLM's extra keys: the same
// prompt under another salt or adapter hits nothing, under the same one it hits.
func TestCacheSaltAndLoRASeparatePrefixes(t *testing.T) {
	t.Parallel()
	e := startEngine(t, Options{MaxNumSeqs: 2, Tokens: 1, PromptTokensDetails: true, LoRAModules: []string{"adapter-a"}})
	prompt := quote(words("salt", 40))
	cached := func(extra string) string {
		t.Helper()
		code, _, body := post(t, e.URL(), "/v1/completions", `{"prompt":`+prompt+extra+`}`)
		if code != 200 {
			t.Fatalf("%d %s", code, body)
		}
		if m := regexp.MustCompile(`"cached_tokens":(\d+)`).FindSubmatch(body); m != nil {
			return string(m[1])
		}
		return "0"
	}
	steps := []struct{ extra, want string }{
		{``, "0"}, {``, "32"},
		{`,"cache_salt":"s1"`, "0"}, {`,"cache_salt":"s1"`, "32"}, {`,"cache_salt":"s2"`, "0"},
		{`,"model":"adapter-a"`, "0"}, {`,"model":"adapter-a"`, "32"},
	}
	for i, s := range steps {
		if got := cached(s.extra); got != s.want {
			t.Fatalf("step %d (%s): %s cached tokens, want %s", i, s.extra, got, s.want)
		}
	}
	if code, _, body := post(t, e.URL(), "/v1/completions", `{"prompt":"x","cache_salt":""}`); code != 400 || !strings.Contains(string(body), "cache_salt") {
		t.Errorf("empty cache_salt: %d %s", code, body)
	}
}

// BlockStored carries the adapter and one extra_keys entry per block, the salt on the
// prompt's first block only, as vLLM's block pool writes them.
func TestBlockStoredCarriesExtraKeys(t *testing.T) {
	c := newKVCache(8)
	c.events, c.blockSize = true, 2
	hold, _, _ := c.acquire([]uint64{1, 2, 3}, 0, 3)
	c.commit(&hold, []uint64{1, 2, 3}, []uint32{10, 11, 12, 13, 14, 15}, extraKeys{lora: "ad", loraID: 1, salt: "s"})
	ev := c.takeEvents()
	if got := fmt.Sprintf("%+v", ev); len(ev) != 1 ||
		!strings.Contains(got, "TokenIDs:[10 11 12 13 14 15]") || !strings.Contains(got, "ExtraKeys:[[ad s] [ad] [ad]]") {
		t.Fatalf("events %s", got)
	}
}
