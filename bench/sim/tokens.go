package sim

import (
	"strings"
	"sync"

	"github.com/narwhal-router/narwhal/bench/sim/tokenizer"
)

// The simulator's "model": token i of every output is contentWords[i mod len], reasoning
// token i is reasoningWords[i mod len], and every logprob is a fixed function of i, so
// tests can compare bytes.

var contentWords = [...]string{
	" alpha", " beta", " gamma", " delta", " epsilon", " zeta", " eta", " theta",
	" iota", " kappa", " lambda", " mu", " nu", " xi", " omicron", " pi",
	" rho", " sigma", " tau", " upsilon", " phi", " chi", " psi", " omega",
}

var reasoningWords = [...]string{" Let", " me", " think", " it", " over", "."}

// TokenText returns the text of output token i (0-based) of any generation.
func TokenText(i int) string { return contentWords[i%len(contentWords)] }

func reasoningText(i int) string { return reasoningWords[i%len(reasoningWords)] }

// tokenLogprob is the logprob of sampled token i: -0.125 … -1.0, exact in binary so
// Go and Python print it alike.
func tokenLogprob(i int) float64 { return -float64(i%8+1) / 8 }

// altToken and altLogprob are the rank-th (1-based) runner-up at position i.
func altToken(i, rank int) string { return TokenText(i + rank) }

func altLogprob(i, rank int) float64 { return tokenLogprob(i) - float64(rank) - 0.5 }

// Words returns a text of n words that is exactly n tokens for the default tokenizer (each
// word is one token with or without a leading space), for tests and benchmarks that count
// tokens. Texts of different tags start at different words of the pool (tags are numbered in
// the order first seen, up to the pool's size), so they share no leading block; the text of
// a tag is a prefix of its longer texts.
func Words(tag string, n int) string {
	pool := singleTokenWords()
	wordTags.Lock()
	off, ok := wordTags.offset[tag]
	if !ok {
		off = len(wordTags.offset) % len(pool)
		wordTags.offset[tag] = off
	}
	wordTags.Unlock()
	var b strings.Builder
	for i := range n {
		if i > 0 {
			b.WriteByte(' ')
		}
		b.WriteString(pool[(off+i)%len(pool)])
	}
	return b.String()
}

var wordTags = struct {
	sync.Mutex
	offset map[string]int
}{offset: map[string]int{}}

var (
	poolOnce sync.Once
	pool     []string
)

// singleTokenWords are the default vocabulary's one-token words (tokenizer.SingleTokenWords),
// computed once.
func singleTokenWords() []string {
	poolOnce.Do(func() { pool = tokenizer.Default().SingleTokenWords() })
	return pool
}
