package tokenizer

import (
	"slices"
	"strconv"
	"strings"
	"testing"
)

func TestPreTokenizeFollowsGPT2Pattern(t *testing.T) {
	for _, c := range []struct {
		in   string
		want []string
	}{
		{"Hello world", []string{"Hello", " world"}},
		{"it's  two\nlines", []string{"it", "'s", " ", " two", "\n", "lines"}},
		{"a1 23 ..x", []string{"a", "1", " 23", " ..", "x"}},
		{"end   ", []string{"end", "   "}},
		{"é café", []string{"é", " café"}},
	} {
		if got := preTokenize(c.in); !slices.Equal(got, c.want) {
			t.Errorf("preTokenize(%q) = %q, want %q", c.in, got, c.want)
		}
	}
}

func TestEncodeDecodeRoundTrips(t *testing.T) {
	tok := Default()
	if tok.VocabSize() != 1000 {
		t.Fatalf("vocab size %d, want 1000 (the generated file)", tok.VocabSize())
	}
	for _, s := range []string{"", "The router places a request on the engine that holds its prefix.",
		"ünïcödé ✓ and emoji 🦭", "tabs\tand\nnewlines  ", "<|im_start|>user\nhi<|im_end|>\n"} {
		ids := tok.Encode(s)
		back, err := tok.Decode(ids, false)
		if err != nil || back != s {
			t.Errorf("Decode(Encode(%q)) = %q, %v", s, back, err)
		}
	}
}

func TestSpecialTokensAreSingleIDs(t *testing.T) {
	tok := Default()
	ids := tok.Encode("<|im_start|>user\nhi<|im_end|>")
	if ids[0] != 998 || ids[len(ids)-1] != 999 {
		t.Fatalf("ids %v: want <|im_start|>=998 first and <|im_end|>=999 last", ids)
	}
	text, _ := tok.Decode(ids, true)
	if text != "user\nhi" {
		t.Errorf("skipping special tokens gives %q", text)
	}
}

func TestOutputWordsAreOneTokenEach(t *testing.T) {
	tok := Default()
	for _, w := range strings.Fields("alpha beta gamma delta epsilon zeta eta theta iota kappa lambda mu nu xi omicron pi rho sigma tau upsilon phi chi psi omega") {
		if ids := tok.Encode(" " + w); len(ids) != 1 {
			t.Errorf("%q is %d tokens %v, want 1", " "+w, len(ids), ids)
		}
	}
}

func TestDecodeRejectsUnknownIDs(t *testing.T) {
	if _, err := Default().Decode([]uint32{5, 100000}, false); err == nil {
		t.Fatal("want an error for an id out of vocabulary")
	}
}

func TestChatMLTemplate(t *testing.T) {
	got := ChatML([]Message{{"system", "Be brief."}, {"user", "Hi"}}, true)
	want := "<|im_start|>system\nBe brief.<|im_end|>\n<|im_start|>user\nHi<|im_end|>\n<|im_start|>assistant\n"
	if got != want {
		t.Fatalf("ChatML = %q, want %q", got, want)
	}
}

func TestLoadAcceptsPairMerges(t *testing.T) {
	var vocab strings.Builder
	for b := 0; b < 256; b++ {
		vocab.WriteString(`"` + jsonEsc(string(byteSymbols[b])) + `":` + strconv.Itoa(b) + ",")
	}
	js := `{"pre_tokenizer":{"type":"ByteLevel"},"model":{"type":"BPE","vocab":{` + vocab.String() + `"ab":256},"merges":[["a","b"]]}}`
	tok, err := Load([]byte(js))
	if err != nil {
		t.Fatal(err)
	}
	if ids := tok.Encode("ab"); !slices.Equal(ids, []uint32{256}) {
		t.Fatalf("Encode(ab) = %v", ids)
	}
}

func jsonEsc(s string) string {
	return strings.NewReplacer(`\`, `\\`, `"`, `\"`).Replace(s)
}
