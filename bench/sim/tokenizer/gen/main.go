// Command gen trains the simulator's small byte-level BPE tokenizer and writes it as a
// Hugging Face tokenizer.json. The corpus is Narwhal's own writing — the repository's
// README.md and docs/*.md — plus the simulator's output words (so each output token is one
// token), so the file carries no third party's vocabulary. Training is classic BPE: the
// corpus is pre-tokenized with GPT-2's pattern, every piece starts as its byte symbols, and
// the most frequent adjacent pair (ties: the lexically smallest) is merged until the
// vocabulary holds -size ids, the ChatML added tokens included. Same corpus, same file.
//
//	go generate ./bench/sim/tokenizer   (runs: go run ./gen -out tokenizer.json)
package main

import (
	"bytes"
	"flag"
	"fmt"
	"log"
	"os"
	"path/filepath"
	"sort"
	"strconv"
	"strings"

	"github.com/narwhal-router/narwhal/bench/sim/tokenizer"
)

// specials are the added tokens, ids right after the BPE vocabulary.
var specials = []string{"<|endoftext|>", "<|im_start|>", "<|im_end|>"}

// extra is text every simulator model must tokenize well: the output and reasoning words
// (bench/sim/tokens.go) and the chat roles.
const extra = " alpha beta gamma delta epsilon zeta eta theta iota kappa lambda mu nu xi omicron pi" +
	" rho sigma tau upsilon phi chi psi omega Let me think it over. system\n user\n assistant\n"

func main() {
	out := flag.String("out", "tokenizer.json", "file to write")
	root := flag.String("root", "../../..", "repository root (corpus: README.md, docs/*.md)")
	size := flag.Int("size", 1000, "vocabulary size, added tokens included")
	flag.Parse()
	corpus, err := readCorpus(*root)
	if err != nil {
		log.Fatal(err)
	}
	for range 40 {
		corpus = append(corpus, extra)
	}
	merges := train(corpus, *size-256-len(specials))
	if err := os.WriteFile(*out, render(merges), 0o644); err != nil {
		log.Fatal(err)
	}
	fmt.Printf("%s: %d merges, %d ids\n", *out, len(merges), 256+len(merges)+len(specials))
}

func readCorpus(root string) ([]string, error) {
	files, err := filepath.Glob(filepath.Join(root, "docs", "*.md"))
	if err != nil {
		return nil, err
	}
	files = append([]string{filepath.Join(root, "README.md")}, files...)
	sort.Strings(files[1:])
	var texts []string
	for _, f := range files {
		b, err := os.ReadFile(f)
		if err != nil {
			return nil, fmt.Errorf("corpus: %w", err)
		}
		texts = append(texts, string(b))
	}
	return texts, nil
}

// word is one distinct pre-token as its current symbols, with its count in the corpus.
type word struct {
	syms  []string
	count int
}

func train(corpus []string, nMerges int) [][2]string {
	counts := map[string]int{}
	for _, text := range corpus {
		for _, p := range tokenizer.PreTokenize(text) {
			counts[p]++
		}
	}
	keys := make([]string, 0, len(counts))
	for k := range counts {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	words := make([]word, 0, len(keys))
	for _, k := range keys {
		syms := make([]string, len(k))
		for i := 0; i < len(k); i++ {
			syms[i] = string(tokenizer.ByteSymbol(k[i]))
		}
		words = append(words, word{syms, counts[k]})
	}
	var merges [][2]string
	for len(merges) < nMerges {
		pairs := map[[2]string]int{}
		for _, w := range words {
			for i := 0; i+1 < len(w.syms); i++ {
				pairs[[2]string{w.syms[i], w.syms[i+1]}] += w.count
			}
		}
		var best [2]string
		bestN := 0
		for p, n := range pairs {
			if n > bestN || (n == bestN && (p[0]+" "+p[1]) < (best[0]+" "+best[1])) {
				best, bestN = p, n
			}
		}
		if bestN < 2 {
			break // nothing left worth merging
		}
		merges = append(merges, best)
		joined := best[0] + best[1]
		for wi := range words {
			s := words[wi].syms
			for i := 0; i+1 < len(s); i++ {
				if s[i] == best[0] && s[i+1] == best[1] {
					s = append(s[:i+1], s[i+2:]...)
					s[i] = joined
				}
			}
			words[wi].syms = s
		}
	}
	return merges
}

// render writes tokenizer.json by hand so the file is stable byte for byte.
func render(merges [][2]string) []byte {
	var b bytes.Buffer
	q := strconv.Quote
	b.WriteString("{\n  \"version\": \"1.0\",\n  \"truncation\": null,\n  \"padding\": null,\n  \"added_tokens\": [\n")
	for i, s := range specials {
		fmt.Fprintf(&b, "    {\"id\": %d, \"content\": %s, \"single_word\": false, \"lstrip\": false, \"rstrip\": false, \"normalized\": false, \"special\": true}", 256+len(merges)+i, q(s))
		b.WriteString(sep(i, len(specials)))
	}
	b.WriteString("  ],\n  \"normalizer\": null,\n")
	b.WriteString("  \"pre_tokenizer\": {\"type\": \"ByteLevel\", \"add_prefix_space\": false, \"trim_offsets\": true, \"use_regex\": true},\n")
	b.WriteString("  \"post_processor\": null,\n  \"decoder\": {\"type\": \"ByteLevel\", \"add_prefix_space\": true, \"trim_offsets\": true, \"use_regex\": true},\n")
	b.WriteString("  \"model\": {\n    \"type\": \"BPE\",\n    \"dropout\": null,\n    \"unk_token\": null,\n    \"continuing_subword_prefix\": null,\n    \"end_of_word_suffix\": null,\n    \"fuse_unk\": false,\n    \"byte_fallback\": false,\n    \"vocab\": {\n")
	var vocab []string
	for c := 0; c < 256; c++ {
		vocab = append(vocab, string(tokenizer.ByteSymbol(byte(c))))
	}
	for _, m := range merges {
		vocab = append(vocab, m[0]+m[1])
	}
	for i, s := range vocab {
		fmt.Fprintf(&b, "      %s: %d%s", jsonString(s), i, sep(i, len(vocab)))
	}
	b.WriteString("    },\n    \"merges\": [\n")
	for i, m := range merges {
		fmt.Fprintf(&b, "      %s%s", jsonString(m[0]+" "+m[1]), sep(i, len(merges)))
	}
	b.WriteString("    ]\n  }\n}\n")
	return b.Bytes()
}

func sep(i, n int) string {
	if i == n-1 {
		return "\n"
	}
	return ",\n"
}

// jsonString quotes s for JSON (strconv.Quote's escapes differ from JSON's for some runes).
func jsonString(s string) string {
	var b strings.Builder
	b.WriteByte('"')
	for _, r := range s {
		switch {
		case r == '"' || r == '\\':
			b.WriteByte('\\')
			b.WriteRune(r)
		case r < 0x20:
			fmt.Fprintf(&b, "\\u%04x", r)
		default:
			b.WriteRune(r)
		}
	}
	b.WriteByte('"')
	return b.String()
}
