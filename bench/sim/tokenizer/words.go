package tokenizer

import "strings"

// SingleTokenWords are the vocabulary's lower-case words that are one token both after a space
// and at the start of a text, in id order: texts of them, space-separated, are exactly as many
// tokens as words (the simulator's tests and the trace replay count on it).
func (t *Tokenizer) SingleTokenWords() []string {
	var out []string
	for id := range t.VocabSize() {
		s, ok := strings.CutPrefix(t.TokenString(uint32(id)), "Ġ")
		if !ok || len(s) < 2 || strings.Trim(s, "abcdefghijklmnopqrstuvwxyz") != "" {
			continue
		}
		if t.Count(s) == 1 && t.Count(" "+s) == 1 {
			out = append(out, s)
		}
	}
	return out
}
