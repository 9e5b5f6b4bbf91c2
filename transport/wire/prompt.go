package wire

import (
	"strconv"

	"github.com/goccy/go-json"
)

// Prompt is what placement reads of a request's prompt, without a tokenizer: the number of
// parallel samples, a token estimate, and the chained hashes of its leading blocks of words.
type Prompt struct {
	// N is the request's n (1 when absent).
	N int
	// Tokens estimates the prompt's tokens: the larger of its whitespace-separated words and a
	// quarter of its text bytes (a token-id prompt: its ids).
	Tokens int
	// Words is the number of whitespace-separated words (token ids) hashed.
	Words int
	// Blocks are the hashes of the prompt's full blocks of blockWords words, in order. Block
	// i's hash covers its words and block i−1's hash, so two prompts share Blocks[:k] exactly
	// when (barring collisions) their first k×blockWords words are equal.
	Blocks []uint64
}

const (
	fnvOffset uint64 = 14695981039346656037
	fnvPrime  uint64 = 1099511628211
)

// promptHasher cuts words into blocks and chains their hashes.
type promptHasher struct {
	blockWords int
	h          uint64
	inBlock    int
	inWord     bool
	words      int
	bytes      int
	blocks     []uint64
}

func (p *promptHasher) byte(c byte) {
	p.h = (p.h ^ uint64(c)) * fnvPrime
}

// text feeds s, splitting on ASCII whitespace.
func (p *promptHasher) text(s string) {
	p.bytes += len(s)
	for i := 0; i < len(s); i++ {
		c := s[i]
		if c == ' ' || c == '\n' || c == '\t' || c == '\r' || c == '\f' || c == '\v' {
			p.endWord()
			continue
		}
		p.inWord = true
		p.byte(c)
	}
	p.endWord()
}

// endWord closes the current word, and the block once it holds blockWords words.
func (p *promptHasher) endWord() {
	if !p.inWord {
		return
	}
	p.inWord = false
	p.words++
	p.byte(' ')
	p.inBlock++
	if p.inBlock == p.blockWords {
		p.blocks = append(p.blocks, p.h)
		p.inBlock = 0 // the next block starts from this hash: the chain
	}
}

// Prompt reads the prompt for placement: completions' prompt (a string, the first of several
// strings, or token ids), chat's messages' text in order (string contents and the text parts
// of content arrays), or the Responses API's instructions and input (a string or items, read
// like messages). blockWords must be at least 1. A prompt it cannot read (no raw body any
// more, an unexpected shape) gives a zero estimate and no blocks.
func (b *ClientBody) Prompt(blockWords int) Prompt {
	out := Prompt{N: 1}
	if v, ok := b.member("n"); ok && !IsNull(v) {
		if n, err := strconv.Atoi(string(v)); err == nil && n > 0 {
			out.N = n
		}
	}
	h := promptHasher{blockWords: max(1, blockWords), h: fnvOffset}
	switch b.Endpoint {
	case EndpointCompletions:
		v, ok := b.member("prompt")
		if !ok {
			break
		}
		switch v[0] {
		case '"':
			var s string
			if json.Unmarshal(v, &s) == nil {
				h.text(s)
			}
		case '[':
			var list []json.RawMessage
			if json.Unmarshal(v, &list) != nil || len(list) == 0 {
				break
			}
			if list[0][0] == '"' { // several prompts: the first stands for the request
				var s string
				if json.Unmarshal(list[0], &s) == nil {
					h.text(s)
				}
				break
			}
			for _, id := range list { // token ids: one word each
				h.text(string(id))
			}
			h.bytes = 0 // ids are tokens already: no byte estimate
		}
	case EndpointChat, EndpointResponses:
		key := "messages"
		if b.Endpoint == EndpointResponses {
			key = "input" // a string, or items whose content is a string or text parts
			if v, ok := b.member("instructions"); ok && len(v) > 0 && v[0] == '"' {
				var s string
				if json.Unmarshal(v, &s) == nil {
					h.text(s)
				}
			}
		}
		v, ok := b.member(key)
		if !ok || len(v) == 0 {
			break
		}
		if v[0] == '"' {
			var s string
			if json.Unmarshal(v, &s) == nil {
				h.text(s)
			}
			break
		}
		var msgs []struct {
			Content json.RawMessage `json:"content"`
		}
		if json.Unmarshal(v, &msgs) != nil {
			break
		}
		for _, m := range msgs {
			if len(m.Content) == 0 {
				continue
			}
			switch m.Content[0] {
			case '"':
				var s string
				if json.Unmarshal(m.Content, &s) == nil {
					h.text(s)
				}
			case '[':
				var parts []struct {
					Text string `json:"text"`
				}
				if json.Unmarshal(m.Content, &parts) == nil {
					for _, p := range parts {
						h.text(p.Text)
					}
				}
			}
		}
	}
	out.Words, out.Blocks = h.words, h.blocks
	out.Tokens = max(h.words, (h.bytes+3)/4)
	return out
}
