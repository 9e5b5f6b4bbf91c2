package tokenize

import (
	"encoding/json"
	"os"
	"slices"
	"strings"
	"testing"
)

// GPT-2's pattern, split by hand: the pieces concatenate to the text, and each is what the
// regular expression's first matching alternative takes.
func TestPreTokenizerSplitsAsGPT2sPattern(t *testing.T) {
	for _, c := range []struct {
		text string
		want []string
	}{
		{"Hello world", []string{"Hello", " world"}},
		{"it's 2026!", []string{"it", "'s", " 2026", "!"}},
		{"a  b", []string{"a", " ", " b"}},
		{"a\n\n b", []string{"a", "\n\n", " b"}},
		{"x\ny", []string{"x", "\n", "y"}},
		{"end  ", []string{"end", "  "}},
		{" ?!x", []string{" ?!", "x"}},
		{"über 3½", []string{"über", " 3½"}},
		{"'x", []string{"'", "x"}},
	} {
		var got []string
		for s := c.text; s != ""; {
			n := gpt2Piece(s)
			got, s = append(got, s[:n]), s[n:]
		}
		if !slices.Equal(got, c.want) || strings.Join(got, "") != c.text {
			t.Errorf("%q: %q, want %q", c.text, got, c.want)
		}
	}
}

// tinyTokenizer is a tokenizer.json of a few symbols: merges in rank order, an added token and
// a BOS the post-processor puts first.
func tinyTokenizer(t *testing.T, post string) *BPE {
	t.Helper()
	vocab := map[string]int{"a": 0, "b": 1, "c": 2, "ab": 3, "abc": 4, "Ġ": 5, "Ġab": 6, "bc": 7, "<bos>": 8, "<|im_end|>": 9}
	f := map[string]any{
		"added_tokens":   []map[string]any{{"id": 8, "content": "<bos>"}, {"id": 9, "content": "<|im_end|>"}},
		"normalizer":     nil,
		"pre_tokenizer":  map[string]any{"type": "ByteLevel", "add_prefix_space": false, "use_regex": true},
		"post_processor": json.RawMessage(post),
		"model":          map[string]any{"type": "BPE", "vocab": vocab, "merges": []any{"a b", []string{"Ġ", "ab"}, "ab c", "b c"}},
	}
	raw, err := json.Marshal(f)
	if err != nil {
		t.Fatal(err)
	}
	bpe, err := Load(raw)
	if err != nil {
		t.Fatal(err)
	}
	return bpe
}

func TestBPEMergesByRankAndMatchesAddedTokens(t *testing.T) {
	plain := tinyTokenizer(t, `{"type":"ByteLevel"}`)
	bos := tinyTokenizer(t, `{"type":"TemplateProcessing","single":[{"SpecialToken":{"id":"<bos>","type_id":0}},{"Sequence":{"id":"A","type_id":0}}],"special_tokens":{"<bos>":{"id":"<bos>","ids":[8]}}}`)
	for _, c := range []struct {
		name    string
		bpe     *BPE
		text    string
		special bool
		want    []uint32
	}{
		{"a b merges before b c", plain, "abc", true, []uint32{4}},
		{"a space is Ġ, merged with what follows", plain, "c ab", true, []uint32{2, 6}},
		{"an added token is matched first", plain, "ab<|im_end|>bc", true, []uint32{3, 9, 7}},
		{"the template's BOS", bos, "ab", true, []uint32{8, 3}},
		{"no BOS for a rendered chat", bos, "ab", false, []uint32{3}},
	} {
		if got := c.bpe.Encode(c.text, c.special); !slices.Equal(got, c.want) {
			t.Errorf("%s: %q → %v, want %v", c.name, c.text, got, c.want)
		}
	}
}

// What Load refuses is what it would tokenize wrong: those models use render.
func TestLoadRefusesOtherTokenizers(t *testing.T) {
	good, err := os.ReadFile("../../bench/sim/tokenizer/tokenizer.json")
	if err != nil {
		t.Fatal(err)
	}
	if _, err := Load(good); err != nil {
		t.Fatalf("the simulator's byte-level BPE: %v", err)
	}
	for name, edit := range map[string]func(map[string]any){
		"a normalizer":          func(f map[string]any) { f["normalizer"] = map[string]any{"type": "NFC"} },
		"a prefix space":        func(f map[string]any) { f["pre_tokenizer"].(map[string]any)["add_prefix_space"] = true },
		"a Split pre-tokenizer": func(f map[string]any) { f["pre_tokenizer"] = map[string]any{"type": "Split"} },
		"a WordPiece model":     func(f map[string]any) { f["model"].(map[string]any)["type"] = "WordPiece" },
	} {
		var f map[string]any
		if err := json.Unmarshal(good, &f); err != nil {
			t.Fatal(err)
		}
		edit(f)
		raw, _ := json.Marshal(f)
		if _, err := Load(raw); err == nil {
			t.Errorf("%s was loaded", name)
		}
	}
}
