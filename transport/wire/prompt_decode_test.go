package wire

import (
	"math/rand/v2"
	"reflect"
	"strings"
	"testing"

	"github.com/goccy/go-json"
)

// Decoding a prompt's JSON string on the fly hashes exactly what the decoded string would:
// escapes, surrogate pairs, lone surrogates, non-ASCII and invalid UTF-8 included. (The fast
// path keeps a long prompt from being copied while the request is placed.)
func TestPromptTextDecodedInPlaceMatchesTheDecoder(t *testing.T) {
	cases := []string{
		`"plain words here"`, `"tab\tand\nnewline\r\n end"`, `"quote \" slash \/ back \\ end"`,
		`"\b\f controls \u0000 nul"`, `"caf\u00e9 and \u4e2d\u6587"`, `"emoji \ud83d\ude00 pair"`,
		`"lone \ud83d high"`, `"lone \ude00 low"`, `"high then other \ud83d\u0041"`, `"é raw non-ASCII 中文"`,
		"\"invalid \xff\xfe bytes\"", "\"cut \xe4\xb8 rune\"", `""`, `"   "`, `"\u0020\u00a0nbsp"`,
	}
	rng := rand.New(rand.NewPCG(1, 2))
	pieces := []string{"a", " ", "\\n", "\\u00e9", "\\ud83d\\ude00", "é", "\xff", "\\\"", "\\\\", "word", "\\t"}
	for range 2000 {
		var b strings.Builder
		b.WriteByte('"')
		for range rng.IntN(30) {
			b.WriteString(pieces[rng.IntN(len(pieces))])
		}
		b.WriteByte('"')
		cases = append(cases, b.String())
	}
	for _, c := range cases {
		var s string
		if err := json.Unmarshal([]byte(c), &s); err != nil {
			continue
		}
		want := promptHasher{blockWords: 2, h: fnvOffset}
		want.text(s)
		got := promptHasher{blockWords: 2, h: fnvOffset}
		if !got.jsonText([]byte(c)) {
			t.Fatalf("%q: not taken", c)
		}
		if !reflect.DeepEqual(got, want) {
			t.Fatalf("%q: in place %+v, decoded %+v (%q)", c, got, want, s)
		}
	}
}

// A long prompt is placed without copying it.
func TestLongPromptIsNotCopied(t *testing.T) {
	raw := []byte(`{"model":"m","prompt":"` + strings.Repeat("long prompt words\\n", 1<<16) + `"}`)
	b, err := ParseClientBody(EndpointCompletions, raw)
	if err != nil {
		t.Fatal(err)
	}
	chat, err := ParseClientBody(EndpointChat, []byte(`{"model":"m","messages":[{"role":"user","content":"`+strings.Repeat("long prompt words\\n", 1<<16)+`"}]}`))
	if err != nil {
		t.Fatal(err)
	}
	for name, body := range map[string]*ClientBody{"completions": b, "chat": chat} {
		var p Prompt
		allocated := testing.AllocsPerRun(5, func() { p = body.Prompt(64) })
		if p.Words != 3<<16 {
			t.Fatalf("%s: %d words", name, p.Words)
		}
		// The blocks list grows (3×65536/64 hashes); the prompt's 1.1 MiB text is never copied.
		if allocated > 20 {
			t.Fatalf("%s: %.0f allocations", name, allocated)
		}
	}
}
