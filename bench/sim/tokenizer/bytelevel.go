package tokenizer

import (
	"unicode"
	"unicode/utf8"
)

// byteSymbols is GPT-2's bytes_to_unicode table: every byte is shown as a printable rune so
// BPE symbols are strings; printable Latin-1 bytes map to themselves, the rest to U+0100 on.
var byteSymbols [256]rune

// symbolByte inverts byteSymbols.
var symbolByte = map[rune]byte{}

func init() {
	n := 0
	for b := 0; b < 256; b++ {
		printable := (b >= '!' && b <= '~') || (b >= 0xA1 && b <= 0xAC) || (b >= 0xAE && b <= 0xFF)
		if printable {
			byteSymbols[b] = rune(b)
		} else {
			byteSymbols[b] = rune(256 + n)
			n++
		}
		symbolByte[byteSymbols[b]] = byte(b)
	}
}

// ByteSymbol is byte b's symbol in a byte-level vocabulary.
func ByteSymbol(b byte) rune { return byteSymbols[b] }

// preTokenize splits text the way GPT-2's ByteLevel pre-tokenizer does, with the pattern
//
//	's|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+
//
// written out by hand (Go's regexp has no look-ahead). The pieces concatenate to text.
func preTokenize(text string) []string {
	var out []string
	for i := 0; i < len(text); {
		n := matchAt(text, i)
		out = append(out, text[i:i+n])
		i += n
	}
	return out
}

// matchAt is the length of the pattern's match at s[i:] (always ≥ 1).
func matchAt(s string, i int) int {
	rest := s[i:]
	for _, c := range [...]string{"'s", "'t", "'re", "'ve", "'m", "'ll", "'d"} {
		if len(rest) >= len(c) && rest[:len(c)] == c {
			return len(c)
		}
	}
	start := 0
	if rest[0] == ' ' {
		start = 1
	}
	for _, class := range [...]func(rune) bool{unicode.IsLetter, unicode.IsNumber, isOther} {
		if n := runOf(rest[start:], class); n > 0 {
			return start + n
		}
	}
	// Whitespace: a run not followed by a non-space (so the last space of a run before a
	// word joins the word), else the whole run.
	n := runOf(rest, unicode.IsSpace)
	if n == 0 {
		_, size := utf8.DecodeRuneInString(rest)
		return size // unreachable: every rune is a letter, number, space or other
	}
	if n == len(rest) {
		return n
	}
	if _, last := utf8.DecodeLastRuneInString(rest[:n]); n-last > 0 {
		return n - last
	}
	return n
}

func isOther(r rune) bool { return !unicode.IsSpace(r) && !unicode.IsLetter(r) && !unicode.IsNumber(r) }

// runOf is the byte length of the leading run of runes in class.
func runOf(s string, class func(rune) bool) int {
	n := 0
	for n < len(s) {
		r, size := utf8.DecodeRuneInString(s[n:])
		if !class(r) {
			break
		}
		n += size
	}
	return n
}

// PreTokenize exposes the pre-tokenizer to the generator (gen/).
func PreTokenize(text string) []string { return preTokenize(text) }
