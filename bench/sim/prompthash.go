package sim

import (
	"strconv"

	json "github.com/goccy/go-json"
)

// Prefix-cache keys, the scheme the router's prefix index computes too (transport/wire's
// Prompt.Blocks), so that the KV events the simulator publishes name blocks the router can
// look up. A prompt's tokens are its whitespace-separated words (the decimal ids of a
// token-id prompt; for chat, the words of every message's text in order), cut into blocks of
// BlockSize tokens. The hash of the block ending at word n is the 64-bit FNV-1a of the
// prompt's first n words, each followed by one space: a hash stands for all the text before
// it, as vLLM's chained block hashes do, and two prompts share block i's hash exactly when
// their first (i+1)·BlockSize words are equal. It does not depend on the block size either:
// the router's block of placement.prefix_block_words words ends where one of the
// simulator's blocks ends whenever the one is a multiple of the other, and has that block's
// hash. A partial last block has no hash.

const (
	fnvOffset = 14695981039346656037
	fnvPrime  = 1099511628211
)

// blockHasher hashes a stream of tokens into block hashes (above).
type blockHasher struct {
	size int
	n    int // tokens in the current block
	h    uint64
	out  []uint64
	// ids, when wanted, collects every token's id (KV events' token_ids).
	wantIDs bool
	ids     []uint32
}

// tokenID is a word's token id in KV events: the number itself for a token-id prompt's
// decimal words (below 2³²), else the word's 32-bit FNV-1a hash.
func tokenID(t string) uint32 {
	if n, err := strconv.ParseUint(t, 10, 32); err == nil {
		return uint32(n)
	}
	h := uint32(2166136261)
	for i := 0; i < len(t); i++ {
		h = (h ^ uint32(t[i])) * 16777619
	}
	return h
}

func newBlockHasher(size int) *blockHasher {
	return &blockHasher{size: size, h: fnvOffset}
}

func (b *blockHasher) token(t string) {
	if b.wantIDs {
		b.ids = append(b.ids, tokenID(t))
	}
	for i := 0; i < len(t); i++ {
		b.h = (b.h ^ uint64(t[i])) * fnvPrime
	}
	b.h = (b.h ^ ' ') * fnvPrime
	b.n++
	if b.n == b.size {
		b.out = append(b.out, b.h)
		b.n = 0
	}
}

// text feeds every whitespace-separated word of s.
func (b *blockHasher) text(s string) {
	start := -1
	for i := 0; i <= len(s); i++ {
		space := i == len(s)
		if !space {
			switch s[i] {
			case ' ', '\t', '\n', '\r', '\v', '\f':
				space = true
			}
		}
		switch {
		case space && start >= 0:
			b.token(s[start:i])
			start = -1
		case !space && start < 0:
			start = i
		}
	}
}

// BlockHashes returns the chained hashes of the full blocks of text's words, the keys
// the capacity model's prefix cache uses for a completions prompt.
func BlockHashes(text string, blockSize int) []uint64 {
	b := newBlockHasher(blockSize)
	b.text(text)
	return b.out
}

// promptHashes hashes a validated request's prompt (see the package comment above) and,
// with ids, returns its token ids too.
func promptHashes(api endpoint, w *wireRequest, blockSize int, ids bool) ([]uint64, []uint32) {
	b := newBlockHasher(blockSize)
	b.wantIDs = ids
	b.feed(api, w)
	return b.out, b.ids
}

func (b *blockHasher) feed(api endpoint, w *wireRequest) {
	if api == responsesAPI {
		texts, _ := responsesTexts(w.Input, w.Instructions)
		for _, t := range texts {
			b.text(t)
		}
		return
	}
	if api == chatAPI {
		var msgs []wireMessage
		if json.Unmarshal(w.Messages, &msgs) == nil {
			for _, m := range msgs {
				if text, err := messageText(m.Content); err == nil {
					b.text(text)
				}
			}
		}
		return
	}
	var v any
	if json.Unmarshal(w.Prompt, &v) != nil {
		return
	}
	if p, ok := v.([]any); ok && len(p) == 1 {
		v = p[0]
	}
	switch p := v.(type) {
	case string:
		b.text(p)
	case []any:
		for _, id := range p {
			if f, ok := id.(float64); ok {
				b.token(strconv.FormatInt(int64(f), 10))
			}
		}
	}
}
