package tokenize

import (
	"encoding/json"
	"fmt"
	"sort"
	"strings"
	"sync"
	"unicode"
	"unicode/utf8"
)

// BPE is a byte-level BPE tokenizer read from a Hugging Face tokenizer.json (the file a model
// ships), as the tokenizers library runs it for GPT-2-style models: added tokens are matched
// first, literally; the rest is split by the ByteLevel pre-tokenizer's GPT-2 pattern, each
// piece's bytes are written as byte symbols, merged by rank, and looked up in the vocabulary.
// A post-processor's TemplateProcessing adds the special tokens its single template puts
// before the sequence (a BOS). Other models (a Split pre-tokenizer with another pattern, a
// normalizer, SentencePiece) are refused by Load: their prompts go through render.
type BPE struct {
	vocab   map[string]uint32
	ranks   map[string]int // "left\x00right" → the merge's rank
	added   []addedToken   // longest first
	leading []uint32       // the post-processor's tokens before the prompt

	mu    sync.Mutex
	words map[string][]uint32 // a cache of encoded pieces, emptied when full
}

type addedToken struct {
	text string
	id   uint32
}

// maxCachedPieces bounds the piece cache.
const maxCachedPieces = 1 << 16

// byteRune is GPT-2's bytes_to_unicode: the printable bytes of Latin-1 stand for themselves,
// the others, in order, for U+0100 onwards.
var byteRune = func() (t [256]rune) {
	next := rune(256)
	for b := range t {
		switch {
		case b >= '!' && b <= '~', b >= 0xa1 && b <= 0xac, b >= 0xae:
			t[b] = rune(b)
		default:
			t[b] = next
			next++
		}
	}
	return t
}()

type tokenizerFile struct {
	AddedTokens []struct {
		ID      uint32 `json:"id"`
		Content string `json:"content"`
	} `json:"added_tokens"`
	Normalizer    json.RawMessage `json:"normalizer"`
	PreTokenizer  json.RawMessage `json:"pre_tokenizer"`
	PostProcessor json.RawMessage `json:"post_processor"`
	Model         struct {
		Type   string            `json:"type"`
		Vocab  map[string]uint32 `json:"vocab"`
		Merges []json.RawMessage `json:"merges"`
	} `json:"model"`
}

// Load reads a tokenizer.json.
func Load(data []byte) (*BPE, error) {
	var f tokenizerFile
	if err := json.Unmarshal(data, &f); err != nil {
		return nil, fmt.Errorf("tokenizer.json: %w", err)
	}
	if f.Model.Type != "BPE" || len(f.Model.Vocab) == 0 {
		return nil, fmt.Errorf("tokenizer.json: model %q with %d entries: only byte-level BPE is read here", f.Model.Type, len(f.Model.Vocab))
	}
	if isSet(f.Normalizer) {
		return nil, fmt.Errorf("tokenizer.json: a normalizer is not supported: use source render for this model")
	}
	var pre struct {
		Type           string `json:"type"`
		AddPrefixSpace bool   `json:"add_prefix_space"`
		UseRegex       *bool  `json:"use_regex"`
	}
	if err := json.Unmarshal(f.PreTokenizer, &pre); err != nil || pre.Type != "ByteLevel" || pre.AddPrefixSpace || (pre.UseRegex != nil && !*pre.UseRegex) {
		return nil, fmt.Errorf("tokenizer.json: pre_tokenizer %s: only ByteLevel with GPT-2's pattern and no prefix space is read here; use source render", f.PreTokenizer)
	}
	t := &BPE{vocab: f.Model.Vocab, ranks: make(map[string]int, len(f.Model.Merges)), words: map[string][]uint32{}}
	for i, raw := range f.Model.Merges {
		pair, err := mergePair(raw)
		if err != nil {
			return nil, fmt.Errorf("tokenizer.json: merge %d: %w", i, err)
		}
		if _, dup := t.ranks[pair]; !dup {
			t.ranks[pair] = i
		}
	}
	for _, a := range f.AddedTokens {
		if a.Content != "" {
			t.added = append(t.added, addedToken{a.Content, a.ID})
		}
	}
	sort.SliceStable(t.added, func(i, j int) bool { return len(t.added[i].text) > len(t.added[j].text) })
	leading, err := t.leadingTokens(f.PostProcessor)
	if err != nil {
		return nil, err
	}
	t.leading = leading
	return t, nil
}

func isSet(raw json.RawMessage) bool {
	s := strings.TrimSpace(string(raw))
	return s != "" && s != "null"
}

// mergePair reads a merge, "a b" (older files) or ["a", "b"], as the ranks' key.
func mergePair(raw json.RawMessage) (string, error) {
	var s string
	if json.Unmarshal(raw, &s) == nil {
		l, r, ok := strings.Cut(s, " ")
		if !ok {
			return "", fmt.Errorf("%q is not two symbols", s)
		}
		return l + "\x00" + r, nil
	}
	var p [2]string
	if err := json.Unmarshal(raw, &p); err != nil {
		return "", fmt.Errorf("%s is neither \"a b\" nor [a, b]", raw)
	}
	return p[0] + "\x00" + p[1], nil
}

// leadingTokens are the special tokens a TemplateProcessing's single template puts before
// the sequence; none for a ByteLevel (or no) post-processor.
func (t *BPE) leadingTokens(raw json.RawMessage) ([]uint32, error) {
	if !isSet(raw) {
		return nil, nil
	}
	var pp struct {
		Type   string `json:"type"`
		Single []struct {
			Sequence     *struct{} `json:"Sequence"`
			SpecialToken *struct {
				ID string `json:"id"`
			} `json:"SpecialToken"`
		} `json:"single"`
		SpecialTokens map[string]struct {
			IDs []uint32 `json:"ids"`
		} `json:"special_tokens"`
	}
	if err := json.Unmarshal(raw, &pp); err != nil {
		return nil, fmt.Errorf("tokenizer.json: post_processor: %w", err)
	}
	if pp.Type != "TemplateProcessing" {
		return nil, nil
	}
	var out []uint32
	for _, piece := range pp.Single {
		if piece.Sequence != nil {
			break
		}
		if piece.SpecialToken != nil {
			out = append(out, pp.SpecialTokens[piece.SpecialToken.ID].IDs...)
		}
	}
	return out, nil
}

// Encode returns text's token ids, as vLLM's tokenizer call with add_special_tokens gives them
// for a completions prompt (special says whether the post-processor's leading tokens are
// added: not for a rendered chat template, which writes its own).
func (t *BPE) Encode(text string, special bool) []uint32 {
	var out []uint32
	if special {
		out = append(out, t.leading...)
	}
	for text != "" {
		at, tok := t.nextAdded(text)
		out = t.encodePlain(out, text[:at])
		if tok == nil {
			break
		}
		out = append(out, tok.id)
		text = text[at+len(tok.text):]
	}
	return out
}

// nextAdded finds the first added token in s (the longest at a position): its offset, or
// len(s) and nil.
func (t *BPE) nextAdded(s string) (int, *addedToken) {
	best, bestAt := (*addedToken)(nil), len(s)
	for i := range t.added {
		if at := strings.Index(s[:min(len(s), bestAt+len(t.added[i].text))], t.added[i].text); at >= 0 && at < bestAt {
			best, bestAt = &t.added[i], at
		}
	}
	return bestAt, best
}

func (t *BPE) encodePlain(out []uint32, s string) []uint32 {
	for s != "" {
		n := gpt2Piece(s)
		out = append(out, t.piece(s[:n])...)
		s = s[n:]
	}
	return out
}

// piece encodes one pre-tokenized piece, through the cache.
func (t *BPE) piece(p string) []uint32 {
	t.mu.Lock()
	ids, ok := t.words[p]
	t.mu.Unlock()
	if ok {
		return ids
	}
	syms := make([]string, 0, len(p))
	for i := 0; i < len(p); i++ {
		syms = append(syms, string(byteRune[p[i]]))
	}
	for len(syms) > 1 {
		best, rank := -1, 0
		for i := 0; i+1 < len(syms); i++ {
			if r, ok := t.ranks[syms[i]+"\x00"+syms[i+1]]; ok && (best < 0 || r < rank) {
				best, rank = i, r
			}
		}
		if best < 0 {
			break
		}
		l, r := syms[best], syms[best+1]
		merged := syms[:0]
		for i := 0; i < len(syms); i++ {
			if i+1 < len(syms) && syms[i] == l && syms[i+1] == r {
				merged = append(merged, l+r)
				i++
				continue
			}
			merged = append(merged, syms[i])
		}
		syms = merged
	}
	ids = make([]uint32, 0, len(syms))
	for _, s := range syms {
		if id, ok := t.vocab[s]; ok {
			ids = append(ids, id)
		}
	}
	t.mu.Lock()
	if len(t.words) >= maxCachedPieces {
		clear(t.words)
	}
	t.words[p] = ids
	t.mu.Unlock()
	return ids
}

// gpt2Piece is the length of the piece GPT-2's pattern matches at the start of s:
//
//	's|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+
//
// (Go's regexp has no look-ahead, so the alternatives are tried by hand, in order.)
func gpt2Piece(s string) int {
	if s[0] == '\'' {
		for _, c := range [...]string{"s", "t", "re", "ve", "m", "ll", "d"} {
			if strings.HasPrefix(s[1:], c) {
				return 1 + len(c)
			}
		}
	}
	start := 0
	if s[0] == ' ' && len(s) > 1 {
		start = 1
	}
	if r, _ := utf8.DecodeRuneInString(s[start:]); !unicode.IsSpace(r) {
		class := classOf(r)
		n := start
		for n < len(s) {
			r, w := utf8.DecodeRuneInString(s[n:])
			if unicode.IsSpace(r) || classOf(r) != class {
				break
			}
			n += w
		}
		return n
	}
	// A run of whitespace: all of it at the end of s, else all but its last character (which
	// goes with what follows), or the one character when that is all it is.
	n, last := 0, 0
	for n < len(s) {
		r, w := utf8.DecodeRuneInString(s[n:])
		if !unicode.IsSpace(r) {
			if last > 0 {
				return last
			}
			return n
		}
		last = n
		n += w
	}
	return n
}

// classOf is which of the pattern's runs r continues: letters, numbers, or anything else
// that is not whitespace.
func classOf(r rune) int {
	switch {
	case unicode.IsLetter(r):
		return 1
	case unicode.IsNumber(r):
		return 2
	}
	return 3
}
