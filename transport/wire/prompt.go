package wire

import (
	"strconv"
	"unicode/utf16"
	"unicode/utf8"

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
	// Words is the number of whitespace-separated words (token ids) hashed; once the prompt's
	// tokens are known (transport/tokenize), its tokens.
	Words int
	// PerBlock is how many of Words each block covers: blockWords, or the engines' block size
	// in tokens once the blocks are keys of the prompt's tokens.
	PerBlock int
	// Blocks are the hashes of the prompt's full blocks of blockWords words, in order. Block
	// i's hash covers its words and block i−1's hash, so two prompts share Blocks[:k] exactly
	// when (barring collisions) their first k×blockWords words are equal. Their top bit is
	// clear: the keys of token blocks (transport/blockkey) have it set, and replace these when
	// the prompt's tokens are known.
	Blocks []uint64
	// Tokenized says Blocks are keys of the prompt's tokens, and Tokens and Words its token count.
	Tokenized bool
}

const (
	fnvOffset uint64 = 14695981039346656037
	fnvPrime  uint64 = 1099511628211
	// wordDomain is the bit a word block's hash never has (transport/blockkey's keys do).
	wordDomain uint64 = 1 << 63
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
	for i := 0; i < len(s); i++ {
		p.char(s[i])
	}
	p.endWord()
}

// char takes one byte of decoded prompt text.
func (p *promptHasher) char(c byte) {
	p.bytes++
	if c == ' ' || c == '\n' || c == '\t' || c == '\r' || c == '\f' || c == '\v' {
		p.endWord()
		return
	}
	p.inWord = true
	p.byte(c)
}

// jsonText takes the text of the JSON string v (quotes included) as text(s) would take the
// string json.Unmarshal decodes from it, decoding escapes as it goes instead of allocating the
// string: a long prompt costs no copy. It reports false (and takes nothing) for what is not a
// plain string the scanner validated; the caller then decodes it the slow way.
func (p *promptHasher) jsonText(v []byte) bool {
	if len(v) < 2 || v[0] != '"' || v[len(v)-1] != '"' {
		return false
	}
	s := v[1 : len(v)-1]
	for i := 0; i < len(s); i++ {
		if c := s[i]; c >= utf8.RuneSelf || c == '\\' {
			return p.jsonTextSlow(s, i)
		}
	}
	for _, c := range s {
		p.char(c)
	}
	p.endWord()
	return true
}

// jsonTextSlow is jsonText for a string with escapes or non-ASCII bytes, from byte i on (the
// bytes before it are plain ASCII).
func (p *promptHasher) jsonTextSlow(s []byte, i int) bool {
	for _, c := range s[:i] {
		p.char(c)
	}
	var enc [utf8.UTFMax]byte
	for i < len(s) {
		c := s[i]
		switch {
		case c == '\\':
			if i+1 >= len(s) {
				return false
			}
			i += 2
			switch s[i-1] {
			case '"', '\\', '/':
				p.char(s[i-1])
			case 'b':
				p.char('\b')
			case 'f':
				p.char('\f')
			case 'n':
				p.char('\n')
			case 'r':
				p.char('\r')
			case 't':
				p.char('\t')
			case 'u':
				r, n := decodeEscapedRune(s[i-2:])
				if n == 0 {
					return false
				}
				i += n - 2
				for _, b := range enc[:utf8.EncodeRune(enc[:], r)] {
					p.char(b)
				}
			default:
				return false
			}
		case c < utf8.RuneSelf:
			p.char(c)
			i++
		default:
			r, n := utf8.DecodeRune(s[i:])
			i += n
			for _, b := range enc[:utf8.EncodeRune(enc[:], r)] { // invalid bytes: U+FFFD, as decoding does
				p.char(b)
			}
		}
	}
	p.endWord()
	return true
}

// decodeEscapedRune decodes a \uXXXX escape at the start of s, with its low surrogate when it
// is a high one; n is the bytes it took (0: not an escape). A lone surrogate is U+FFFD, as
// decoding gives.
func decodeEscapedRune(s []byte) (r rune, n int) {
	hex4 := func(b []byte) (rune, bool) {
		if len(b) < 6 || b[0] != '\\' || b[1] != 'u' {
			return 0, false
		}
		v, err := strconv.ParseUint(string(b[2:6]), 16, 16)
		return rune(v), err == nil
	}
	r, ok := hex4(s)
	if !ok {
		return 0, 0
	}
	if utf16.IsSurrogate(r) {
		if r2, ok := hex4(s[6:]); ok {
			if d := utf16.DecodeRune(r, r2); d != utf8.RuneError {
				return d, 12
			}
		}
		return utf8.RuneError, 6
	}
	return r, 6
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
		p.blocks = append(p.blocks, p.h&^wordDomain)
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
	switch b.Endpoint.EngineShape() {
	case EndpointCompletions:
		v, ok := b.member("prompt")
		if !ok {
			break
		}
		switch v[0] {
		case '"':
			h.jsonTextOrDecode(v)
		case '[':
			var list []json.RawMessage
			if json.Unmarshal(v, &list) != nil || len(list) == 0 {
				break
			}
			if list[0][0] == '"' { // several prompts: the first stands for the request
				h.jsonTextOrDecode(list[0])
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
				h.jsonTextOrDecode(v)
			}
		}
		v, ok := b.member(key)
		if !ok || len(v) == 0 {
			break
		}
		if v[0] == '"' {
			h.jsonTextOrDecode(v)
			break
		}
		if v[0] == '[' {
			h.messages(v)
		}
	}
	out.Words, out.Blocks, out.PerBlock = h.words, h.blocks, h.blockWords
	out.Tokens = max(h.words, (h.bytes+3)/4)
	return out
}

// jsonTextOrDecode takes the text of the JSON string v: decoded on the fly (jsonText), or
// through the decoder for a shape jsonText does not take.
func (p *promptHasher) jsonTextOrDecode(v []byte) {
	if p.jsonText(v) {
		return
	}
	var s string
	if json.Unmarshal(v, &s) == nil {
		p.text(s)
	}
}

// messages takes the text of a messages (or Responses input items) array: each item's content,
// a string or text parts, walked in place so that a long message is not copied.
func (p *promptHasher) messages(v []byte) {
	it := openItems(0)
	var fields []Field
	for {
		start, more := it.element(v)
		if !more {
			return
		}
		end, err := SkipValue(v, start)
		if err != nil {
			return
		}
		it.end = end
		item := v[start:end]
		if item[0] != '{' {
			continue
		}
		if fields, err = ScanObject(item, fields[:0]); err != nil {
			continue
		}
		content, ok := Member(item, fields, "content")
		if !ok || len(content) == 0 {
			continue
		}
		switch content[0] {
		case '"':
			p.jsonTextOrDecode(content)
		case '[':
			var parts []struct {
				Text string `json:"text"`
			}
			if json.Unmarshal(content, &parts) == nil {
				for _, part := range parts {
					p.text(part.Text)
				}
			}
		}
	}
}

// Lookup returns the raw value of the body's top-level member key, for the prompt's tokenizer
// (transport/tokenize: the prompt, the messages, cache_salt).
func (b *ClientBody) Lookup(key string) ([]byte, bool) { return b.member(key) }
