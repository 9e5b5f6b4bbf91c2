// Package tokenizer is the engine simulator's tokenizer: a byte-level BPE read from a Hugging
// Face tokenizer.json, the file real models ship (model.type "BPE" with its vocab and merges,
// a ByteLevel pre-tokenizer with GPT-2's split pattern, and added tokens such as ChatML's
// <|im_start|>), and the ChatML chat template. Default is the small tokenizer.json next to this
// file, trained by gen/ on the repository's own documentation (gen/main.go says how).
//
// It owns text ↔ token ids and nothing else: what a block or a hash is belongs to the
// simulator's KV cache.
package tokenizer

import (
	_ "embed"
	"fmt"
	"sort"
	"strings"
	"sync"

	json "github.com/goccy/go-json"
)

//go:generate go run ./gen -out tokenizer.json

//go:embed tokenizer.json
var defaultJSON []byte

var (
	defaultOnce sync.Once
	defaultTok  *Tokenizer
)

// Default returns the embedded tokenizer. It panics if the embedded file does not load,
// which the package's tests rule out.
func Default() *Tokenizer {
	defaultOnce.Do(func() {
		t, err := Load(defaultJSON)
		if err != nil {
			panic(fmt.Sprintf("tokenizer: embedded tokenizer.json: %v", err))
		}
		defaultTok = t
	})
	return defaultTok
}

// Tokenizer encodes text to token ids and back. It is safe for concurrent use.
type Tokenizer struct {
	vocab   map[string]uint32 // byte-level symbol string → id
	tokens  []string          // id → symbol string ("" for ids without a token)
	ranks   map[[2]string]int // merge pair → its priority (lower merges first)
	special []addedToken      // added tokens, longest first, matched literally in text
	isSpec  map[uint32]bool

	mu    sync.Mutex
	cache map[string][]uint32 // pre-token → ids
}

type addedToken struct {
	id      uint32
	content string
}

// fileJSON is the part of tokenizer.json this package reads.
type fileJSON struct {
	AddedTokens []struct {
		ID      uint32 `json:"id"`
		Content string `json:"content"`
		Special bool   `json:"special"`
	} `json:"added_tokens"`
	PreTokenizer *struct {
		Type string `json:"type"`
	} `json:"pre_tokenizer"`
	Model struct {
		Type   string            `json:"type"`
		Vocab  map[string]uint32 `json:"vocab"`
		Merges []json.RawMessage `json:"merges"`
	} `json:"model"`
}

// Load reads a Hugging Face tokenizer.json holding a byte-level BPE model.
func Load(data []byte) (*Tokenizer, error) {
	var f fileJSON
	if err := json.Unmarshal(data, &f); err != nil {
		return nil, fmt.Errorf("tokenizer: parse tokenizer.json: %w", err)
	}
	if f.Model.Type != "BPE" {
		return nil, fmt.Errorf("tokenizer: model type %q, want BPE", f.Model.Type)
	}
	if f.PreTokenizer == nil || f.PreTokenizer.Type != "ByteLevel" {
		return nil, fmt.Errorf("tokenizer: want a ByteLevel pre-tokenizer")
	}
	t := &Tokenizer{vocab: f.Model.Vocab, ranks: make(map[[2]string]int, len(f.Model.Merges)),
		isSpec: map[uint32]bool{}, cache: map[string][]uint32{}}
	size := 0
	for _, id := range t.vocab {
		size = max(size, int(id)+1)
	}
	for _, a := range f.AddedTokens {
		size = max(size, int(a.ID)+1)
	}
	t.tokens = make([]string, size)
	for s, id := range t.vocab {
		t.tokens[id] = s
	}
	for i, raw := range f.Model.Merges {
		pair, err := parseMerge(raw)
		if err != nil {
			return nil, fmt.Errorf("tokenizer: merge %d: %w", i, err)
		}
		if _, dup := t.ranks[pair]; !dup {
			t.ranks[pair] = i
		}
	}
	for _, b := range byteSymbols {
		if _, ok := t.vocab[string(b)]; !ok {
			return nil, fmt.Errorf("tokenizer: vocab lacks the byte symbol %q", b)
		}
	}
	for _, a := range f.AddedTokens {
		t.special = append(t.special, addedToken{a.ID, a.Content})
		t.tokens[a.ID] = a.Content
		t.isSpec[a.ID] = a.Special
	}
	sort.SliceStable(t.special, func(i, j int) bool { return len(t.special[i].content) > len(t.special[j].content) })
	return t, nil
}

// parseMerge reads a merge as "a b" (the classic format) or ["a", "b"] (the newer one).
func parseMerge(raw json.RawMessage) ([2]string, error) {
	var s string
	if json.Unmarshal(raw, &s) == nil {
		a, b, ok := strings.Cut(s, " ")
		if !ok {
			return [2]string{}, fmt.Errorf("%q is not two symbols", s)
		}
		return [2]string{a, b}, nil
	}
	var p []string
	if err := json.Unmarshal(raw, &p); err != nil || len(p) != 2 {
		return [2]string{}, fmt.Errorf("%s is not a pair", raw)
	}
	return [2]string{p[0], p[1]}, nil
}

// VocabSize is the number of ids, added tokens included.
func (t *Tokenizer) VocabSize() int { return len(t.tokens) }

// Encode returns text's token ids. Added tokens (<|im_start|>, …) written in the text are
// their own ids, as Hugging Face tokenizers treat them.
func (t *Tokenizer) Encode(text string) []uint32 {
	var out []uint32
	for text != "" {
		at, tok := t.nextSpecial(text)
		for _, piece := range preTokenize(text[:at]) {
			out = append(out, t.encodeWord(piece)...)
		}
		if tok == nil {
			break
		}
		out = append(out, tok.id)
		text = text[at+len(tok.content):]
	}
	return out
}

// Count is len(Encode(text)).
func (t *Tokenizer) Count(text string) int { return len(t.Encode(text)) }

// nextSpecial finds the first added token in s: its offset and the token, or len(s), nil.
func (t *Tokenizer) nextSpecial(s string) (int, *addedToken) {
	best, bestAt := (*addedToken)(nil), len(s)
	for i := range t.special {
		if at := strings.Index(s[:min(len(s), bestAt+len(t.special[i].content))], t.special[i].content); at >= 0 && at < bestAt {
			best, bestAt = &t.special[i], at
		}
	}
	return bestAt, best
}

// encodeWord runs BPE over one pre-token.
func (t *Tokenizer) encodeWord(word string) []uint32 {
	t.mu.Lock()
	ids, ok := t.cache[word]
	t.mu.Unlock()
	if ok {
		return ids
	}
	syms := make([]string, 0, len(word))
	for i := 0; i < len(word); i++ {
		syms = append(syms, string(byteSymbols[word[i]]))
	}
	for len(syms) > 1 {
		best, at := -1, -1
		for i := 0; i+1 < len(syms); i++ {
			if r, ok := t.ranks[[2]string{syms[i], syms[i+1]}]; ok && (best < 0 || r < best) {
				best, at = r, i
			}
		}
		if at < 0 {
			break
		}
		merged := syms[at] + syms[at+1]
		syms = append(syms[:at+1], syms[at+2:]...)
		syms[at] = merged
		// Merge every other occurrence of the same pair in this pass, left to right, as the
		// reference implementation does.
		for i := at + 1; i+1 < len(syms); i++ {
			if syms[i]+syms[i+1] == merged && t.ranks[[2]string{syms[i], syms[i+1]}] == best {
				syms = append(syms[:i+1], syms[i+2:]...)
				syms[i] = merged
			}
		}
	}
	ids = make([]uint32, len(syms))
	for i, s := range syms {
		ids[i] = t.vocab[s] // every merge result and byte symbol is in the vocab
	}
	t.mu.Lock()
	if len(t.cache) < 1<<16 {
		t.cache[word] = ids
	}
	t.mu.Unlock()
	return ids
}

// Decode returns the text of ids; skipSpecial leaves special added tokens out. An id
// outside the vocabulary is an error.
func (t *Tokenizer) Decode(ids []uint32, skipSpecial bool) (string, error) {
	var b []byte
	for _, id := range ids {
		if int(id) >= len(t.tokens) || t.tokens[id] == "" {
			return "", fmt.Errorf("token id %d is out of vocabulary (size %d)", id, len(t.tokens))
		}
		if t.isSpec[id] {
			if !skipSpecial {
				b = append(b, t.tokens[id]...)
			}
			continue
		}
		if _, added := t.isSpec[id]; added {
			b = append(b, t.tokens[id]...)
			continue
		}
		for _, r := range t.tokens[id] {
			b = append(b, symbolByte[r])
		}
	}
	return string(b), nil
}

// TokenString is id's vocabulary entry as Hugging Face's convert_ids_to_tokens prints it
// (byte-level symbols: a leading space is "Ġ").
func (t *Tokenizer) TokenString(id uint32) string {
	if int(id) < len(t.tokens) {
		return t.tokens[id]
	}
	return ""
}
