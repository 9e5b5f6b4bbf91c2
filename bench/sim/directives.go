package sim

import (
	"fmt"
	"strings"
)

// directivePrefix starts a per-request fault directive inside prompt text:
// @sim:<leg>.<fault>[=<arg>], ending at the next whitespace.
const directivePrefix = "@sim:"

// parseDirectives returns every directive in text, or an error naming the first one
// that is not in the fault vocabulary. chat says whether chat-only faults are allowed.
func parseDirectives(text string, chat bool) ([]fault, error) {
	var out []fault
	for {
		i := strings.Index(text, directivePrefix)
		if i < 0 {
			return out, nil
		}
		text = text[i+len(directivePrefix):]
		end := strings.IndexAny(text, " \t\r\n\v\f")
		if end < 0 {
			end = len(text)
		}
		spec := text[:end]
		text = text[end:]
		f, err := parseFault(spec)
		if err != nil {
			return nil, fmt.Errorf("unknown directive %s%s: %w", directivePrefix, spec, err)
		}
		if !chat && (f.kind == faultToolCall || f.kind == faultReasoning) {
			return nil, fmt.Errorf("unknown directive %s%s: only /v1/chat/completions has tool calls and reasoning",
				directivePrefix, spec)
		}
		out = append(out, f)
	}
}
