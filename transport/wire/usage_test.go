package wire

import "testing"

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

// The relay's count of output tokens agrees with decoding the usage chunk, and costs nothing.
func TestOutputTokensOf(t *testing.T) {
	for _, c := range []struct {
		data string
		want int
	}{
		{`{"id":"c","choices":[],"usage":{"prompt_tokens":5,"completion_tokens":3,"total_tokens":8}}`, 3},
		{`{"usage":{"output_tokens":4}}`, 4},
		{`{"usage":{"completion_tokens":null,"output_tokens":6}}`, 6},
		{`{"usage":{"completion_tokens":2},"usage":{"completion_tokens":9}}`, 9}, // the last one, as a JSON parser reads it
		{`{"usage":null}`, -1},
		{`{"choices":[]}`, -1},
		{`[DONE]`, -1},
		{`{"usage":{"completion_tokens":"x"}}`, -1},
		{`{"usage":`, -1},
	} {
		if got := OutputTokensOf([]byte(c.data), -1); got != c.want {
			t.Errorf("%s: %d, want %d", c.data, got, c.want)
		}
		if want := CompletionTokens(UsageOf([]byte(c.data)), -1); want != c.want {
			t.Errorf("%s: the decoding reader says %d, the test %d", c.data, want, c.want)
		}
	}
	data := []byte(`{"id":"c","choices":[],"usage":{"prompt_tokens":5,"completion_tokens":3,"total_tokens":8}}`)
	if allocs := testing.AllocsPerRun(100, func() { OutputTokensOf(data, 0) }); allocs != 0 {
		t.Fatalf("%.0f allocations", allocs)
	}
}
