package wire

import (
	"encoding/json"
	"testing"
)

func TestCorrectCachedTokens(t *testing.T) {
	cases := []struct {
		in, want string
		cached   int
		changed  bool
	}{
		{`data: {"id":"x","choices":[],"usage":{"prompt_tokens":100,"total_tokens":102,"completion_tokens":2,"prompt_tokens_details":{"cached_tokens":99}}}` + "\n\n",
			`data: {"id":"x","choices":[],"usage":{"prompt_tokens":100,"total_tokens":102,"completion_tokens":2,"prompt_tokens_details":{"cached_tokens":0}}}` + "\n\n", 0, true},
		{`{"usage":{"prompt_tokens_details": {"cached_tokens": 7}}}`, `{"usage":{"prompt_tokens_details": {"cached_tokens": 1234}}}`, 1234, true},
		{`{"usage":{"prompt_tokens":3,"prompt_tokens_details":null}}`, ``, 5, false},
		{`{"usage":{"prompt_tokens":3}}`, ``, 5, false},
		{`{"usage":{"prompt_tokens_details":{"cached_tokens":5}}}`, ``, 5, false},
		{`{"usage":{"input_tokens":9,"input_tokens_details":{"cached_tokens":8}}}`, `{"usage":{"input_tokens":9,"input_tokens_details":{"cached_tokens":0}}}`, 0, true},
		// A Responses stream's last event: the usage follows the output, whose text may quote
		// the key (escaped, so it is never taken for it).
		{"event: response.completed\ndata: " + `{"response":{"output":[{"content":[{"text":"say \"input_tokens_details\":{\"cached_tokens\":5}"}]}],` +
			`"usage":{"input_tokens":400,"input_tokens_details":{"cached_tokens":399},"output_tokens":2}},"type":"response.completed"}` + "\n\n",
			"event: response.completed\ndata: " + `{"response":{"output":[{"content":[{"text":"say \"input_tokens_details\":{\"cached_tokens\":5}"}]}],` +
				`"usage":{"input_tokens":400,"input_tokens_details":{"cached_tokens":0},"output_tokens":2}},"type":"response.completed"}` + "\n\n", 0, true},
		{"data: [DONE]\n\n", ``, 0, false},
	}
	for _, c := range cases {
		got, changed := CorrectCachedTokens(nil, []byte(c.in), c.cached)
		if changed != c.changed || string(got) != c.want {
			t.Errorf("CorrectCachedTokens(%s, %d) = %q, %v; want %q, %v", c.in, c.cached, got, changed, c.want, c.changed)
		}
	}
	if n := CachedTokens([]byte(`{"usage":{"prompt_tokens_details":{"cached_tokens":42}}}`)); n != 42 {
		t.Errorf("CachedTokens = %d", n)
	}
	if n := CachedTokens([]byte(`{"usage":{"prompt_tokens_details":null},"x":{"cached_tokens":3}}`)); n != 0 {
		t.Errorf("CachedTokens outside the details = %d", n)
	}
}

func TestPromptEstimateAndBlocks(t *testing.T) {
	b, err := ParseClientBody(EndpointChat, []byte(`{"model":"m","n":3,"messages":[{"role":"system","content":"a b c d"},{"role":"user","content":[{"type":"text","text":"e f"}]}]}`))
	if err != nil {
		t.Fatal(err)
	}
	p := b.Prompt(2)
	if p.N != 3 || p.Words != 6 || len(p.Blocks) != 3 || p.Tokens != 6 {
		t.Fatalf("prompt %+v", p)
	}
	c, _ := ParseClientBody(EndpointCompletions, []byte(`{"model":"m","prompt":"a b c d e f"}`))
	q := c.Prompt(2)
	for i := range q.Blocks {
		if q.Blocks[i] != p.Blocks[i] {
			t.Fatalf("the same words hash differently across endpoints at block %d", i)
		}
	}
	d, _ := ParseClientBody(EndpointCompletions, []byte(`{"model":"m","prompt":"a b X d e f"}`))
	if r := d.Prompt(2); r.Blocks[0] != q.Blocks[0] || r.Blocks[1] == q.Blocks[1] || r.Blocks[2] == q.Blocks[2] {
		t.Fatalf("a changed word must change its block and every later one, not earlier ones")
	}
	r, err := ParseClientBody(EndpointResponses, []byte(`{"model":"m","instructions":"a b","input":[{"role":"user","content":"c d e f"}]}`))
	if err != nil {
		t.Fatal(err)
	}
	if rp := r.Prompt(2); rp.Words != 6 || len(rp.Blocks) != 3 || rp.Blocks[2] != p.Blocks[2] {
		t.Fatalf("responses prompt %+v", rp)
	}
	e, _ := ParseClientBody(EndpointCompletions, []byte(`{"model":"m","prompt":"supercalifragilisticexpialidocious"}`))
	if r := e.Prompt(64); r.Tokens != 9 || r.N != 1 {
		t.Fatalf("one long word: %+v (want a quarter of its bytes)", r)
	}
}

// decodedTokens is TokensOf's oracle: the same counts read by decoding the JSON.
func decodedTokens(data string) (Tokens, bool) {
	type details struct {
		Cached *int `json:"cached_tokens"`
	}
	var raw struct {
		Usage    json.RawMessage `json:"usage"`
		Response struct {
			Usage json.RawMessage `json:"usage"`
		} `json:"response"`
	}
	if json.Unmarshal([]byte(data), &raw) != nil {
		return Tokens{-1, -1, -1}, false
	}
	u := raw.Usage
	if u == nil {
		u = raw.Response.Usage
	}
	var v struct {
		Prompt        *int     `json:"prompt_tokens"`
		Input         *int     `json:"input_tokens"`
		Completion    *int     `json:"completion_tokens"`
		Output        *int     `json:"output_tokens"`
		PromptDetails *details `json:"prompt_tokens_details"`
		InputDetails  *details `json:"input_tokens_details"`
	}
	if u == nil || json.Unmarshal(u, &v) != nil || string(u) == "null" {
		return Tokens{-1, -1, -1}, false
	}
	first := func(ps ...*int) int {
		for _, p := range ps {
			if p != nil {
				return *p
			}
		}
		return -1
	}
	var cached []*int
	for _, d := range []*details{v.PromptDetails, v.InputDetails} {
		if d != nil {
			cached = append(cached, d.Cached)
		}
	}
	return Tokens{Prompt: first(v.Prompt, v.Input), Completion: first(v.Completion, v.Output), Cached: first(cached...)}, true
}

// The relay's token counts agree with decoding the usage, and cost nothing per stream.
func TestTokensOf(t *testing.T) {
	for _, c := range []struct {
		data string
		want Tokens
		ok   bool
	}{
		{`{"id":"c","choices":[],"usage":{"prompt_tokens":5,"completion_tokens":3,"total_tokens":8}}`, Tokens{5, 3, -1}, true},
		{`{"usage":{"prompt_tokens":9,"completion_tokens":3,"prompt_tokens_details":{"cached_tokens":8}}}`, Tokens{9, 3, 8}, true},
		{`{"usage":{"prompt_tokens":9,"prompt_tokens_details":null}}`, Tokens{9, -1, -1}, true},
		{`{"usage":{"input_tokens":6,"output_tokens":4,"input_tokens_details":{"cached_tokens":2}}}`, Tokens{6, 4, 2}, true},
		{`{"type":"response.completed","response":{"id":"r","usage":{"input_tokens":6,"output_tokens":7}}}`, Tokens{6, 7, -1}, true},
		{`{"usage":{"completion_tokens":null,"output_tokens":6}}`, Tokens{-1, 6, -1}, true},
		{`{"usage":{"completion_tokens":2},"usage":{"completion_tokens":9}}`, Tokens{-1, 9, -1}, true},        // the last one, as a JSON parser reads it
		{`{"object":"list","data":[],"usage":{"prompt_tokens":4,"total_tokens":4}}`, Tokens{4, -1, -1}, true}, // embeddings
		{`{"usage":null}`, Tokens{-1, -1, -1}, false},
		{`{"choices":[]}`, Tokens{-1, -1, -1}, false},
		{`[DONE]`, Tokens{-1, -1, -1}, false},
		{`{"usage":{"completion_tokens":"x"}}`, Tokens{-1, -1, -1}, true},
		{`{"usage":`, Tokens{-1, -1, -1}, false},
	} {
		got, ok := TokensOf([]byte(c.data))
		if got != c.want || ok != c.ok {
			t.Errorf("%s: %+v %v, want %+v %v", c.data, got, ok, c.want, c.ok)
		}
		if want, wantOK := decodedTokens(c.data); wantOK && (want != c.want || !c.ok) {
			t.Errorf("%s: the decoding reader says %+v, the test %+v", c.data, want, c.want)
		}
	}
	for _, data := range [][]byte{
		[]byte(`{"id":"c","choices":[],"usage":{"prompt_tokens":5,"completion_tokens":3,"prompt_tokens_details":{"cached_tokens":4}}}`),
		[]byte("[DONE]"),
		[]byte(`{"type":"response.completed","response":{"usage":{"input_tokens":6,"output_tokens":7}}}`),
	} {
		if allocs := testing.AllocsPerRun(100, func() { TokensOf(data) }); allocs != 0 {
			t.Fatalf("%s: %.0f allocations", data, allocs)
		}
	}
}
