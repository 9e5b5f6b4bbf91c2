package wire

import (
	"bytes"
	"fmt"
	"math/rand/v2"
	"strings"
	"testing"
)

// classifyCases are inputs on which an in-place scan could easily part from the decoder:
// malformed JSON, type errors, duplicate keys, null, escapes, case and whitespace. want is the
// decoder's verdict (classifyOracle), which Classify must give.
var classifyCases = []struct {
	data string
	want EventKind
}{
	// syntax errors anywhere, even after the output, are meta: the decoder fails
	{`{"choices":[{"text":"a"}]`, EventMeta},
	{`{"choices":[{"text":"a"}]}x`, EventMeta},
	{`{"choices":[{"text":"a"}]}{}`, EventMeta},
	{"{\"choices\":[{\"text\":\"a\"}]}\x00", EventMeta},
	{`{"choices":[{"text":"a"}],}`, EventMeta},
	{`{"choices":[{"text":"a"},]}`, EventMeta},
	{`{"choices":[{"text":"a"}],"x":tru}`, EventMeta},
	{`{"choices":[{"text":"a"}],"x":nul}`, EventMeta},
	{`{"choices":[{"text":"a"}],"x":01}`, EventMeta},
	{`{"choices":[{"text":"a"}],"x":1.}`, EventMeta},
	{`{"choices":[{"text":"a"}],"x":-}`, EventMeta},
	{`{"choices":[{"text":"a"}],"x":.5}`, EventMeta},
	{`{"choices":[{"text":"a"}],"x":+1}`, EventMeta},
	{`{"choices":[{"text":"a"}],"x":"\x"}`, EventMeta},
	{`{"choices":[{"text":"a"}],"x":"\u12"}`, EventMeta},
	{"{\"choices\":[{\"text\":\"a\x01\"}]}", EventMeta}, // a control byte in a string
	{`{"choices":[{"text":"a"}],"x":{"a"}}`, EventMeta},
	{`{"choices":[{"text":"a"}],"x":[1,]}`, EventMeta},
	{"\ufeff{\"choices\":[{\"text\":\"a\"}]}", EventMeta},
	{"{\"choices\":[{\"text\":\"a\"}]}\u00a0", EventMeta},
	{``, EventMeta},
	{` `, EventMeta},
	// the grammar of skipped members: numbers, escapes, control bytes, brackets, separators
	{`{"x":-0.e1,"choices":[{"text":"a"}]}`, EventMeta},
	{`{"x":1e+,"choices":[{"text":"a"}]}`, EventMeta},
	{`{"x":1ee1,"choices":[{"text":"a"}]}`, EventMeta},
	{`{"x":2.,"choices":[{"text":"a"}]}`, EventMeta},
	{`{"x":-,"choices":[{"text":"a"}]}`, EventMeta},
	{`{"x":--1,"choices":[{"text":"a"}]}`, EventMeta},
	{`{"x":0x1,"choices":[{"text":"a"}]}`, EventMeta},
	{`{"x":Infinity,"choices":[{"text":"a"}]}`, EventMeta},
	{`{"x":0.0e-0,"y":-1.5E+10,"z":1e5,"w":[0,-0,10],"choices":[{"text":"a"}]}`, EventToken},
	{`{"x":"\u00G0","choices":[{"text":"a"}]}`, EventMeta},
	{`{"x":"\uABCD\uabcd","choices":[{"text":"a"}]}`, EventToken},
	{`{"x":"\U1234","choices":[{"text":"a"}]}`, EventMeta},
	{`{"x":"\a","choices":[{"text":"a"}]}`, EventMeta},
	{`{"x":"\'","choices":[{"text":"a"}]}`, EventMeta},
	{"{\"x\":\"\x1f\",\"choices\":[{\"text\":\"a\"}]}", EventMeta},
	{"{\"x\":\"0123456789abcdef\x1f\",\"choices\":[{\"text\":\"a\"}]}", EventMeta},
	{"{\"x\":\"\x7f\xc3\x28\xed\xa0\x80\",\"choices\":[{\"text\":\"a\"}]}", EventToken},
	{`{"choices":[{"text":"a"}],"x":"abc`, EventMeta},
	{`{"choices":[{"text":"a"}],"x":"0123456789abcdef\`, EventMeta},
	{`{"choices":[{"text":"a"}],"x":"\u12`, EventMeta},
	{`{"x":[1},"choices":[{"text":"a"}]}`, EventMeta},
	{`{"x":{"a":1],"choices":[{"text":"a"}]}`, EventMeta},
	{`{"x":{"a":[}]},"choices":[{"text":"a"}]}`, EventMeta},
	{`{"x":{"a" 1},"choices":[{"text":"a"}]}`, EventMeta},
	{`{"x":{"a":},"choices":[{"text":"a"}]}`, EventMeta},
	{`{"x":{a:1},"choices":[{"text":"a"}]}`, EventMeta},
	{`{"x":{,},"choices":[{"text":"a"}]}`, EventMeta},
	{`{"x":[,],"choices":[{"text":"a"}]}`, EventMeta},
	{`{"x":[1 2],"choices":[{"text":"a"}]}`, EventMeta},
	{`{"x":{"a":1 "b":2},"choices":[{"text":"a"}]}`, EventMeta},
	{`{"x":{"a":1,},"choices":[{"text":"a"}]}`, EventMeta},
	{`{"x":[[]],"y":{"a":{"b":[{}]}},"choices":[{"text":"a"}]}`, EventToken},
	{`{"x" "choices":[{"text":"a"}]}`, EventMeta},
	{`{"choices":[{"text":"a"}] "x":1}`, EventMeta},
	{`{"choices":[{"text":"a"} {}]}`, EventMeta},
	{`{"choices":[,{"text":"a"}]}`, EventMeta},
	{`{"choices":[{"text":"a",}]}`, EventMeta},
	{`{"choices":[{"text" "a"}]}`, EventMeta},
	{`{"choices":[{"delta":{"content":"a",}}]}`, EventMeta},
	{`{"choices":[{"delta":{"content":"a" "x":1}}]}`, EventMeta},
	{`{"choices":[{"delta":{"tool_calls":[1,}}]}`, EventMeta},
	{`{"choices":[{"text":nul}]}`, EventMeta},
	{`{"choices":[nul]}`, EventMeta},
	{`{"choices":nul}`, EventMeta},
	{`{"type":nul}`, EventMeta},
	{`{"choices":[{"delta":nul}]}`, EventMeta},
	{`{"choices":[{"text":"a"}],"usage":{"a":1,}}`, EventMeta},
	{`{"type":"x.delta","delta":[1,]}`, EventMeta},
	// long strings (the decoder scans those past 64 bytes differently)
	{`{"x":"` + strings.Repeat("a", 80) + "\x01" + `","choices":[{"text":"a"}]}`, EventMeta},
	{`{"x":"` + strings.Repeat("a", 70) + `\q","choices":[{"text":"a"}]}`, EventMeta},
	{`{"x":"` + strings.Repeat("a", 70) + `\u00e9\"` + strings.Repeat("\xe9", 70) + `","choices":[{"text":"a"}]}`, EventToken},
	{`{"choices":[{"text":"` + strings.Repeat("a", 200) + `"}]}`, EventToken},
	{`{"choices":[{"delta":{"content":"` + strings.Repeat(`\n`, 100) + `"}}]}`, EventToken},
	{`{"choices":[{"text":"` + strings.Repeat("a", 100) + "\x1f" + `"}]}`, EventMeta},
	{`{"` + strings.Repeat("k", 100) + `":1,"choices":[{"text":"a"}]}`, EventToken},
	{`{"type":"` + strings.Repeat("a", 100) + `.delta","delta":"x"}`, EventToken},
	{`{"type":"` + strings.Repeat("a", 100) + `\u002edelta","delta":"x"}`, EventToken},
	// what strict JSON allows in skipped members
	{`{"x":-0,"y":1E+2,"z":"\uD800\uDC00\/","w":"` + "\x7f\xff" + `","choices":[{"text":"a"}]}`, EventToken},
	{`{"x":[[[{"choices":[]}]]],"choices":[{"text":"a"}]}`, EventToken},
	// top-level values that are not objects
	{`null`, EventMeta},
	{` null `, EventMeta},
	{`[{"choices":[{"text":"a"}]}]`, EventMeta},
	{`"choices"`, EventMeta},
	{`12`, EventMeta},
	// type errors are meta wherever they are
	{`{"choices":{"text":"a"}}`, EventMeta},
	{`{"choices":"a"}`, EventMeta},
	{`{"choices":[{"text":5}]}`, EventMeta},
	{`{"choices":[{"text":"a"},1]}`, EventMeta},
	{`{"choices":[{"text":"a","finish_reason":true}]}`, EventMeta},
	{`{"choices":[{"delta":[]}]}`, EventMeta},
	{`{"choices":[{"delta":"x"}]}`, EventMeta},
	{`{"choices":[{"delta":{"content":["x"]}}]}`, EventMeta},
	{`{"choices":[{"text":"a"}],"type":5}`, EventMeta},
	{`{"type":{"a":1}}`, EventMeta},
	// null
	{`{"choices":null}`, EventMeta},
	{`{"choices":[null]}`, EventMeta},
	{`{"choices":[{"text":null,"finish_reason":null,"delta":null}]}`, EventMeta},
	{`{"choices":[{"finish_reason":null}]}`, EventMeta},
	{`{"choices":[{"finish_reason":""}]}`, EventToken},
	{`{"choices":[{"delta":{"content":null,"reasoning":null,"reasoning_content":null,"tool_calls":null}}]}`, EventMeta},
	{`{"choices":null,"usage":{"a":1}}`, EventUsage},
	{`{"usage":null}`, EventMeta},
	// escapes: an escaped string is never empty
	{`{"choices":[{"text":"\u0000"}]}`, EventToken},
	{`{"choices":[{"delta":{"content":"\""}}]}`, EventToken},
	{`{"choices":[{"delta":{"reasoning":"\n"}}]}`, EventToken},
	{`{"choices":[{"delta":{"reasoning_content":"\ud800"}}]}`, EventToken},
	{`{"choices":[{"text":"` + "\xff" + `"}]}`, EventToken},
	{`{"choices":[{"text":""},{"text":""}]}`, EventMeta},
	{`{"choices":[{"text":""},{"text":"b"}]}`, EventToken},
	// tool_calls is raw: more than two bytes and not null
	{`{"choices":[{"delta":{"tool_calls":[]}}]}`, EventMeta},
	{`{"choices":[{"delta":{"tool_calls":[ ]}}]}`, EventToken},
	{`{"choices":[{"delta":{"tool_calls": [] }}]}`, EventMeta},
	{`{"choices":[{"delta":{"tool_calls":{}}}]}`, EventMeta},
	{`{"choices":[{"delta":{"tool_calls":""}}]}`, EventMeta},
	{`{"choices":[{"delta":{"tool_calls":"ab"}}]}`, EventToken},
	{`{"choices":[{"delta":{"tool_calls":12}}]}`, EventMeta},
	{`{"choices":[{"delta":{"tool_calls": 123 }}]}`, EventToken},
	{`{"choices":[{"delta":{"tool_calls":true}}]}`, EventToken},
	{`{"choices":[{"delta":{"tool_calls":[{"index":0,"function":{"arguments":"{\"a\":[1,{}]}"}}]}}]}`, EventToken},
	// duplicate keys: the last one counts
	{`{"choices":[{"text":"a","text":null}]}`, EventMeta},
	{`{"choices":[{"text":"a","text":""}]}`, EventMeta},
	{`{"choices":[{"text":"","text":"a"}]}`, EventToken},
	{`{"choices":[{"finish_reason":"stop","finish_reason":null}]}`, EventMeta},
	{`{"choices":[{"delta":{"content":"a","content":""}}]}`, EventMeta},
	{`{"choices":[{"delta":{"tool_calls":[{}],"tool_calls":null}}]}`, EventMeta},
	{`{"usage":{"a":1},"usage":null}`, EventMeta},
	{`{"usage":null,"usage":{"a":1}}`, EventUsage},
	{`{"type":"x","type":null}`, EventMeta},
	{`{"type":"response.completed","type":null}`, EventDone},
	{`{"type":"response.completed","type":""}`, EventMeta},
	{`{"type":"x.delta","delta":"x","delta":null}`, EventMeta},
	// a second "delta" object is decoded into the first; null resets it
	{`{"choices":[{"delta":{"content":"a"},"delta":{"role":"x"}}]}`, EventToken},
	{`{"choices":[{"delta":{"content":"a"},"delta":null}]}`, EventMeta},
	{`{"choices":[{"delta":{"content":"a"},"delta":null,"delta":{}}]}`, EventMeta},
	{`{"choices":[{"delta":{"content":"a"},"delta":{"content":null}}]}`, EventMeta},
	// a second "choices" array is decoded into the first one's elements
	{`{"choices":[{"text":"a"}],"choices":[]}`, EventMeta},
	{`{"choices":[{"text":"a"}],"choices":[{}]}`, EventToken},
	{`{"choices":[{"text":"a"}],"choices":null,"choices":[{}]}`, EventMeta},
	{`{"choices":[{"delta":{"content":"a"}}],"choices":[],"choices":[{}]}`, EventToken},
	{`{"choices":[{"delta":{"content":"a"}}],"choices":[{"delta":{"role":"x"}}]}`, EventToken},
	{`{"choices":[{"delta":{"content":"a"}}],"choices":[null]}`, EventToken},
	{`{"choices":[{"text":"a"}],"choices":[],"usage":{"a":1}}`, EventUsage},
	// keys match regardless of ASCII case, and as the decoder folds Unicode
	{`{"CHOICES":[{"TeXt":"a"}]}`, EventToken},
	{`{"Choices":[{"Delta":{"Content":"a"}}]}`, EventToken},
	{`{"choices":[{"text":"a"}],"Choices":null}`, EventMeta},
	{`{"choice\u017f":[{"text":"a"}]}`, EventToken},
	{"{\"choice\u017f\":[{\"text\":\"a\"}]}", EventToken},
	{`{"choices":[{"\u0074ext":"a"}]}`, EventToken},
	{"{\"choices\":[{\"te\xffxt\":\"a\"}]}", EventMeta},
	{`{"choices ":[{"text":"a"}]}`, EventMeta},
	{`{"text":"a","delta":{"content":"a"},"finish_reason":"stop"}`, EventMeta},
	// whitespace everywhere
	{" \t\r\n{ \"choices\" : [ { \"delta\" : { \"content\" : \"a\" } } ] } \n", EventToken},
	{" { \"choices\" : [ ] , \"usage\" : { } } ", EventUsage},
	{`{"choices":[],"usage":{}}`, EventUsage},
	// usage only without choices
	{`{"choices":[{"text":""}],"usage":{"a":1}}`, EventMeta},
	{`{"choices":[{"text":"a"}],"usage":{"a":1}}`, EventToken},
	{`{"usage":""}`, EventUsage},
	{`{"usage":0}`, EventUsage},
	// Responses events
	{`{"type":"response.output_text.delta","delta":"x"}`, EventToken},
	{`{"type":"response.output_text.delta","delta":""}`, EventMeta},
	{`{"type":"response.output_text.delta","delta": "" }`, EventMeta},
	{`{"type":"response.output_text.delta","delta":" "}`, EventToken},
	{`{"type":"response.output_text.delta","delta":[]}`, EventToken},
	{`{"type":"response.output_text.delta","delta":null}`, EventMeta},
	{`{"type":"response.output_text.delta"}`, EventMeta},
	{`{"type":".delta","delta":"x"}`, EventMeta},
	{`{"type":"x.delta","delta":"x"}`, EventToken},
	{`{"type":"response\u002ecompleted"}`, EventDone},
	{`{"type":"response.output_text\u002edelta","delta":1}`, EventToken},
	{`{"type":"RESPONSE.COMPLETED"}`, EventMeta},
	{`{"type":"error"}`, EventError},
	{`{"type":"response.failed"}`, EventError},
	{`{"type":"response.output_item.done","choices":null}`, EventToken},
	{`{"type":"response.completed","choices":[]}`, EventMeta},
	{`{"type":"x","choices":[{"text":"a"}]}`, EventToken},
	{`{"type":"","delta":"x"}`, EventMeta},
	// what Classify answers before decoding
	{`[DONE]`, EventDone},
	{` [DONE]`, EventMeta},
	{`{"error":{"message":"x"}}`, EventError},
	{` { "error" : 1 }`, EventError},
	{`{"Error":{"message":"x"}}`, EventMeta},
}

func TestClassifyMatchesDecoder(t *testing.T) {
	for _, tc := range classifyCases {
		data := []byte(tc.data)
		if got := classifyOracle(data); got != tc.want {
			t.Errorf("decoder: %q is %d, the table says %d", tc.data, got, tc.want)
		}
		if got := Classify(data); got != tc.want {
			t.Errorf("Classify(%q) = %d, want %d (the decoder's)", tc.data, got, tc.want)
		}
	}
	if Classify(nil) != EventMeta {
		t.Error("nil data is not meta")
	}
	// Nesting around the scan's bound (deeper documents are decoded) and the decoder's (10,000
	// levels), well formed or not.
	for _, n := range []int{maxScanDepth - 5, maxScanDepth - 4, maxScanDepth - 3, maxScanDepth - 2, maxScanDepth - 1,
		maxScanDepth, maxScanDepth + 1, 9995, 9996, 9997, 9998, 9999, 10000} {
		for _, tmpl := range []string{`{"x":%s,"choices":[{"text":"a"}]}`, `{"choices":[{"delta":{"tool_calls":%s}}]}`,
			`{"usage":%s}`, `{"choices":[{"x":%s,"text":"a"}]}`, `{"type":"x.delta","delta":%s}`} {
			for _, v := range []string{strings.Repeat("[", n) + strings.Repeat("]", n),
				strings.Repeat(`{"a":`, n) + "1" + strings.Repeat("}", n),
				strings.Repeat("[", n) + strings.Repeat("]", n-1) + "}"} {
				data := []byte(strings.Replace(tmpl, "%s", v, 1))
				if got, want := Classify(data), classifyOracle(data); got != want {
					t.Errorf("%s nested %d deep: Classify %d, the decoder %d", tmpl, n, got, want)
				}
			}
		}
	}
}

// classifySeeds are the data of every event in the vLLM fixtures, the package's other test
// vectors and classifyCases.
func classifySeeds(tb testing.TB) [][]byte {
	var out [][]byte
	for _, name := range []string{"completions-stream.sse", "chat-stream.sse", "chat-stream-tool-call.sse", "stream-error.sse", "stream-error-old.sse"} {
		for _, line := range bytes.Split(fixture(tb, name), []byte("\n")) {
			if d, ok := bytes.CutPrefix(line, []byte("data: ")); ok {
				out = append(out, d)
			}
		}
	}
	for _, ev := range classifyEvents {
		out = append(out, []byte(ev.data))
	}
	for _, tc := range classifyCases {
		out = append(out, []byte(tc.data))
	}
	out = append(out, EventData([]byte(tokenEvent)))
	for _, s := range []string{
		`{"type":"response.created","sequence_number":0,"response":{"id":"r","usage":null}}`,
		`{"type":"response.output_item.added","sequence_number":2,"item":{}}`,
		`{"type":"response.reasoning_text.delta","sequence_number":3,"delta":"hm"}`,
		`{"type":"response.incomplete","sequence_number":5,"response":{}}`,
		`{"type":"response.failed","sequence_number":5,"response":{"error":{"code":"server_error","message":"x"}}}`,
		`{"type":"error","sequence_number":5,"code":"500","message":"boom","param":null}`,
		`{"choices":[{"index":7,"delta":{"tool_calls":[{"index":3,"function":{"arguments":"{"}}]}}]}`,
		`{"choices":[{"index":-1,"delta":{"content":"x"}}]}`,
		"{\"choices\":[{\"delta\":{\"content\":\"\xff\xfe\"}}]}",
		`{"usage":{"completion_tokens":3}}`,
		`not json`,
	} {
		out = append(out, []byte(s))
	}
	return out
}

// FuzzClassifyMatchesDecoder: for any data, Classify gives the decoder's verdict.
func FuzzClassifyMatchesDecoder(f *testing.F) {
	for _, s := range classifySeeds(f) {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		if got, want := Classify(data), classifyOracle(data); got != want {
			t.Fatalf("Classify(%q) = %d, the decoder says %d", data, got, want)
		}
	})
}

// TestClassifyMatchesDecoderOnGeneratedChunks builds chunk-shaped documents from the keys and
// values Classify reads (in any case, duplicated, null, of the wrong type, nested), some of them
// then broken by one byte, and checks Classify against the decoder on each. The generator is
// seeded, so the documents are the same on every run.
func TestClassifyMatchesDecoderOnGeneratedChunks(t *testing.T) {
	// the keys of an object by where it is: the top level, a choice, a delta, anywhere else
	keys := [][]string{
		{"choices", "choices", "Choices", "usage", "type", "delta", "id", "x"},
		{"text", "TEXT", "delta", "delta", "Delta", "finish_reason", "index", "x"},
		{"content", "Content", "reasoning", "reasoning_content", "tool_calls", "role", "x"},
		{"choices", "text", "delta", "content", "a", ""},
	}
	strs := []string{`""`, `""`, `"a"`, `"\u0000"`, `"\""`, `"response.completed"`, `"response.output_text.delta"`,
		`"x.delta"`, `"error"`, `"response.failed"`, `"response.output_item.done"`, `"stop"`, `".delta"`}
	scalars := []string{`null`, `null`, `null`, `0`, `-1`, `12`, `123`, `1.5e3`, `true`, `false`}
	spaces := []string{"", "", "", " ", "\n", " \t"}
	rng := rand.New(rand.NewPCG(17, 1))
	pick := func(list []string) string { return list[rng.IntN(len(list))] }
	var value func(b *strings.Builder, depth, level int)
	object := func(b *strings.Builder, depth, level int) {
		b.WriteByte('{')
		for i, m := 0, rng.IntN(4); i < m; i++ {
			if i > 0 {
				b.WriteByte(',')
			}
			k := pick(keys[level])
			fmt.Fprintf(b, "%s%q%s:", pick(spaces), k, pick(spaces))
			next := 3
			switch {
			case level == 0 && strings.EqualFold(k, "choices"):
				next = 1
			case level == 1 && strings.EqualFold(k, "delta"):
				next = 2
			}
			switch lk := strings.ToLower(k); {
			case next == 3 && level < 3 && lk != "tool_calls" && lk != "usage" && rng.IntN(4) > 0:
				// a member Classify reads as a string, mostly of the right type
				b.WriteString(pick(append(strs, `null`)))
			default:
				value(b, depth+1, next)
			}
		}
		b.WriteByte('}')
	}
	value = func(b *strings.Builder, depth, level int) {
		b.WriteString(pick(spaces))
		n := rng.IntN(10)
		switch {
		case depth < 5 && (n < 3 || level == 2 && n < 6):
			if level == 2 { // a delta
				object(b, depth, 2)
			} else {
				object(b, depth, 3)
			}
		case depth < 5 && (n < 5 || level == 1 && n < 8):
			b.WriteByte('[')
			for i, m := 0, rng.IntN(3); i < m; i++ {
				if i > 0 {
					b.WriteByte(',')
				}
				if level == 1 && rng.IntN(4) > 0 {
					b.WriteString(pick(spaces))
					object(b, depth+1, 1) // a choice
				} else {
					value(b, depth+1, 3)
				}
			}
			b.WriteByte(']')
		case n < 8:
			b.WriteString(pick(strs))
		default:
			b.WriteString(pick(scalars))
		}
		b.WriteString(pick(spaces))
	}
	breaks := []byte(`{}[],:"\ 0n`)
	kinds := map[EventKind]int{}
	for i := 0; i < 40000; i++ {
		var b strings.Builder
		object(&b, 0, 0)
		data := []byte(b.String())
		if rng.IntN(5) == 0 { // one byte replaced, inserted or deleted
			p := rng.IntN(len(data))
			switch rng.IntN(3) {
			case 0:
				data[p] = breaks[rng.IntN(len(breaks))]
			case 1:
				data = append(data[:p], append([]byte{breaks[rng.IntN(len(breaks))]}, data[p:]...)...)
			default:
				data = append(data[:p], data[p+1:]...)
			}
		}
		got, want := Classify(data), classifyOracle(data)
		if got != want {
			t.Fatalf("Classify(%q) = %d, the decoder says %d", data, got, want)
		}
		kinds[got]++
	}
	// the documents reach every verdict, or the check proves little
	for _, k := range []EventKind{EventMeta, EventToken, EventUsage, EventDone, EventError} {
		if kinds[k] < 50 {
			t.Errorf("only %d generated documents are of kind %d (%v)", kinds[k], k, kinds)
		}
	}
	t.Logf("verdicts: %v", kinds)
}
