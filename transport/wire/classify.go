package wire

import (
	"bytes"
	"encoding/binary"
	"math/bits"

	"github.com/goccy/go-json"
)

// Classify says what an event's data carries. A finish_reason counts as output: an engine that
// stops at once (end of sequence) still answered the request.
//
// The verdict is the one a decoding of the data into streamChunk gives (goccy/go-json), which is
// how Classify worked before: a syntax error anywhere or a member of the wrong type is EventMeta,
// a duplicate key counts as its last occurrence (a second "delta" object is decoded into the
// first, null resets it), keys match regardless of case. Classify reaches it without decoding or
// allocating: scanChunk checks the grammar as it reads the members Classify needs, in one pass.
// Rare shapes whose decoding depends on the decoder's memory reuse or Unicode case folding — a
// second "choices" array (decoded into the first one's elements and spare capacity), keys with an
// escape or a non-ASCII byte, nesting deeper than maxScanDepth — are decoded as before.
func Classify(data []byte) EventKind {
	if k, ok := classifyFixed(data); ok {
		return k
	}
	return classifyChunk(data)
}

// classifyFixed gives the verdicts that need no JSON read: no data, [DONE], an error object.
func classifyFixed(data []byte) (EventKind, bool) {
	switch {
	case data == nil:
		return EventMeta, true
	case bytes.Equal(data, doneData):
		return EventDone, true
	case IsErrorData(data):
		return EventError, true
	}
	return 0, false
}

// classifyChunk classifies a chunk or a Responses event (anything classifyFixed leaves).
func classifyChunk(data []byte) EventKind {
	switch k, st := scanChunk(data); st {
	case scanOK:
		return k
	case scanDecode:
		return classifyDecoded(data)
	}
	return EventMeta // the decoder fails on it
}

// scanStatus is how far scanChunk got.
type scanStatus uint8

const (
	scanOK     scanStatus = iota
	scanBad               // a syntax error or a member of the wrong type: the decoder fails
	scanDecode            // a shape only the decoder classifies exactly
)

// maxScanDepth is the nesting scanChunk follows; a deeper document is decoded (the decoder's own
// bound is 10,000 levels).
const maxScanDepth = 64

// scanChunk classifies data in place, checking the JSON grammar as it goes (RFC 8259, with
// invalid UTF-8 allowed in strings, as the decoder allows it).
func scanChunk(data []byte) (EventKind, scanStatus) {
	i := SkipSpace(data, 0)
	if i >= len(data) || data[i] != '{' {
		return EventMeta, scanOK // null decodes to nothing; anything else fails
	}
	var (
		choices    bool // "choices" was seen
		choicesNil = true
		choicesLen int
		token      bool
		usage, dlt []byte // the last "usage" and "delta" values
		typ        []byte // the last string "type" (quoted); null leaves it as it was
		st         scanStatus
	)
	i++
	for first := true; ; first = false {
		key, plain, v, more, ok := nextMember(data, i, first)
		if !ok {
			return 0, scanBad
		}
		if !more {
			i = v
			break
		}
		if !plain {
			return 0, scanDecode
		}
		switch chunkKey(key) {
		case keyChoices:
			if choices {
				return 0, scanDecode // decoded into the first array's elements and spare capacity
			}
			choices = true
			switch data[v] {
			case 'n':
				if i, ok = literal(data, v, "null"); !ok {
					return 0, scanBad
				}
				continue
			case '[':
			default:
				return 0, scanBad
			}
			choicesNil = false
			j := v + 1
			for firstEl := true; ; firstEl, choicesLen = false, choicesLen+1 {
				e, more, ok := nextElement(data, j, firstEl)
				if !ok {
					return 0, scanBad
				}
				if !more {
					j = e
					break
				}
				switch data[e] {
				case 'n': // a zero element
					if j, ok = literal(data, e, "null"); !ok {
						return 0, scanBad
					}
				case '{':
					var t bool
					if t, j, st = scanChoice(data, e); st != scanOK {
						return 0, st
					}
					token = token || t
				default:
					return 0, scanBad
				}
			}
			i = j
		case keyType:
			switch data[v] {
			case 'n':
				if i, ok = literal(data, v, "null"); !ok {
					return 0, scanBad
				}
			case '"':
				if i, _, ok = scanValidString(data, v); !ok {
					return 0, scanBad
				}
				typ = data[v:i]
			default:
				return 0, scanBad
			}
		case keyUsage:
			if i, st = skipValid(data, v, 1); st != scanOK {
				return 0, st
			}
			usage = data[v:i]
		case keyDelta:
			if i, st = skipValid(data, v, 1); st != scanOK {
				return 0, st
			}
			dlt = data[v:i]
		default:
			if i, st = skipValid(data, v, 1); st != scanOK {
				return 0, st
			}
		}
	}
	if SkipSpace(data, i) != len(data) {
		return 0, scanBad // more after the object
	}
	if len(typ) > 2 && choicesNil { // a non-empty type: any escape decodes to a byte at least
		t := typ[1 : len(typ)-1]
		if bytes.IndexByte(t, '\\') >= 0 {
			var s string
			_ = json.Unmarshal(typ, &s) // a valid string: it cannot fail
			t = []byte(s)
		}
		return classifyResponses(t, dlt), scanOK
	}
	if token {
		return EventToken, scanOK
	}
	if choicesLen == 0 && len(usage) > 0 && !IsNull(usage) {
		return EventUsage, scanOK
	}
	return EventMeta, scanOK
}

// scanChoice reads the element of "choices" at data[i] == '{' (nested three deep): whether it
// carries output and the offset past it.
func scanChoice(data []byte, i int) (token bool, end int, st scanStatus) {
	var text, finish, delta, content, reasoning, reasoningContent, toolCalls bool
	i++
	for first := true; ; first = false {
		key, plain, v, more, ok := nextMember(data, i, first)
		if !ok {
			return false, 0, scanBad
		}
		if !more {
			i = v
			break
		}
		if !plain {
			return false, 0, scanDecode
		}
		switch chunkKey(key) {
		case keyText:
			if text, i, ok = stringValue(data, v); !ok {
				return false, 0, scanBad
			}
		case keyFinishReason:
			if _, i, ok = stringValue(data, v); !ok {
				return false, 0, scanBad
			}
			finish = data[v] == '"' // an empty reason is a reason too
		case keyDelta:
			switch data[v] {
			case 'n': // the pointer is reset; a later object is a new delta
				if i, ok = literal(data, v, "null"); !ok {
					return false, 0, scanBad
				}
				delta = false
				continue
			case '{':
			default:
				return false, 0, scanBad
			}
			if !delta { // a new delta; a second object is decoded into the same one
				delta, content, reasoning, reasoningContent, toolCalls = true, false, false, false, false
			}
			j := v + 1
			for first := true; ; first = false {
				key, plain, w, more, ok := nextMember(data, j, first)
				if !ok {
					return false, 0, scanBad
				}
				if !more {
					j = w
					break
				}
				if !plain {
					return false, 0, scanDecode
				}
				var p *bool
				switch chunkKey(key) {
				case keyContent:
					p = &content
				case keyReasoning:
					p = &reasoning
				case keyReasoningContent:
					p = &reasoningContent
				case keyToolCalls:
					if j, st = skipValid(data, w, 4); st != scanOK {
						return false, 0, st
					}
					toolCalls = j-w > 2 && !IsNull(data[w:j]) // as the decoder's raw bytes are read
					continue
				default:
					if j, st = skipValid(data, w, 4); st != scanOK {
						return false, 0, st
					}
					continue
				}
				if *p, j, ok = stringValue(data, w); !ok {
					return false, 0, scanBad
				}
			}
			i = j
		default:
			if i, st = skipValid(data, v, 3); st != scanOK {
				return false, 0, st
			}
		}
	}
	return finish || text || (delta && (content || reasoning || reasoningContent || toolCalls)), i, scanOK
}

// stringValue reads the *string member at data[i]: whether it decodes to a non-empty string
// (null and "" do not) and the offset past it; ok is false for anything but a string or null.
func stringValue(data []byte, i int) (nonEmpty bool, end int, ok bool) {
	switch data[i] {
	case 'n':
		end, ok = literal(data, i, "null")
		return false, end, ok
	case '"':
		end, _, ok = scanValidString(data, i)
		return end-i > 2, end, ok // any escape decodes to one byte at least
	}
	return false, 0, false
}

// nextMember reads the next member of an object at offset i: just past its '{' (first) or past a
// member's value. It returns the quoted key, whether the key is plain (no escape, ASCII only) and
// the offset of its value; at the object's end more is false and val is the offset past its '}'.
// ok is false on a syntax error.
func nextMember(data []byte, i int, first bool) (key []byte, plain bool, val int, more, ok bool) {
	i = SkipSpace(data, i)
	if i >= len(data) {
		return nil, false, 0, false, false
	}
	if data[i] == '}' {
		return nil, false, i + 1, false, true
	}
	if !first {
		if data[i] != ',' {
			return nil, false, 0, false, false
		}
		if i = SkipSpace(data, i+1); i >= len(data) {
			return nil, false, 0, false, false
		}
	}
	if data[i] != '"' {
		return nil, false, 0, false, false
	}
	end, plain, ok := scanValidString(data, i)
	if !ok {
		return nil, false, 0, false, false
	}
	j := SkipSpace(data, end)
	if j >= len(data) || data[j] != ':' {
		return nil, false, 0, false, false
	}
	if j = SkipSpace(data, j+1); j >= len(data) {
		return nil, false, 0, false, false
	}
	return data[i:end], plain, j, true, true
}

// nextElement is nextMember for an array: the offset of its next element, or past its ']'.
func nextElement(data []byte, i int, first bool) (val int, more, ok bool) {
	i = SkipSpace(data, i)
	if i >= len(data) {
		return 0, false, false
	}
	if data[i] == ']' {
		return i + 1, false, true
	}
	if !first {
		if data[i] != ',' {
			return 0, false, false
		}
		if i = SkipSpace(data, i+1); i >= len(data) {
			return 0, false, false
		}
	}
	return i, true, true
}

// skipValid returns the offset past the JSON value at data[i], nested depth deep, checking its
// grammar: scanBad if it is not JSON, scanDecode if it nests deeper than maxScanDepth.
func skipValid(data []byte, i, depth int) (int, scanStatus) {
	var (
		objects uint64 // bit l is set if the container open at level l is an object
		level   int    // containers open
		ok      bool
	)
value:
	if i >= len(data) {
		return 0, scanBad
	}
	switch data[i] {
	case '{', '[':
		if depth+level >= maxScanDepth {
			return 0, scanDecode
		}
		isObject := data[i] == '{'
		if isObject {
			objects |= 1 << level
		} else {
			objects &^= 1 << level
		}
		level++
		if i = SkipSpace(data, i+1); i >= len(data) {
			return 0, scanBad
		}
		if isObject {
			if data[i] == '}' {
				i++
				goto closed
			}
			if i, ok = memberValue(data, i); !ok {
				return 0, scanBad
			}
		} else if data[i] == ']' {
			i++
			goto closed
		}
		goto value
	case '"':
		if i, _, ok = scanValidString(data, i); !ok {
			return 0, scanBad
		}
	case 't':
		i, ok = literal(data, i, "true")
	case 'f':
		i, ok = literal(data, i, "false")
	case 'n':
		i, ok = literal(data, i, "null")
	default:
		i, ok = scanNumber(data, i)
	}
	if !ok {
		return 0, scanBad
	}
	if level == 0 {
		return i, scanOK
	}
next: // past a value inside a container
	if i = SkipSpace(data, i); i >= len(data) {
		return 0, scanBad
	}
	switch data[i] {
	case ',':
		if i = SkipSpace(data, i+1); objects>>(level-1)&1 == 1 {
			if i, ok = memberValue(data, i); !ok {
				return 0, scanBad
			}
		}
		goto value
	case '}':
		if objects>>(level-1)&1 == 0 {
			return 0, scanBad
		}
	case ']':
		if objects>>(level-1)&1 == 1 {
			return 0, scanBad
		}
	default:
		return 0, scanBad
	}
	i++
closed:
	if level--; level == 0 {
		return i, scanOK
	}
	goto next
}

// memberValue reads a member's key and colon at data[i] and returns the offset of its value.
func memberValue(data []byte, i int) (int, bool) {
	if i >= len(data) || data[i] != '"' {
		return 0, false
	}
	end, _, ok := scanValidString(data, i)
	if !ok {
		return 0, false
	}
	if i = SkipSpace(data, end); i >= len(data) || data[i] != ':' {
		return 0, false
	}
	return SkipSpace(data, i+1), true
}

// literal returns the offset past the literal lit at data[i].
func literal(data []byte, i int, lit string) (int, bool) {
	if len(data)-i < len(lit) || string(data[i:i+len(lit)]) != lit {
		return 0, false
	}
	return i + len(lit), true
}

// scanNumber returns the offset past the number at data[i]: -? (0 | [1-9][0-9]*) (. [0-9]+)?
// ([eE] [+-]? [0-9]+)?. What follows it is the caller's to check.
func scanNumber(data []byte, i int) (int, bool) {
	if i < len(data) && data[i] == '-' {
		i++
	}
	switch {
	case i >= len(data):
		return 0, false
	case data[i] == '0':
		i++
	case '1' <= data[i] && data[i] <= '9':
		i = skipDigits(data, i+1)
	default:
		return 0, false
	}
	if i < len(data) && data[i] == '.' {
		j := skipDigits(data, i+1)
		if j == i+1 {
			return 0, false
		}
		i = j
	}
	if i < len(data) && data[i]|0x20 == 'e' { // e or E
		i++
		if i < len(data) && (data[i] == '+' || data[i] == '-') {
			i++
		}
		j := skipDigits(data, i)
		if j == i {
			return 0, false
		}
		i = j
	}
	return i, true
}

func skipDigits(data []byte, i int) int {
	for i < len(data) && data[i]-'0' <= 9 {
		i++
	}
	return i
}

// scanValidString returns the offset past the string at data[i] == '"' and whether it is plain
// (no escape, ASCII only); ok is false for a string the grammar refuses: a control byte, an
// unknown escape, no closing quote. Invalid UTF-8 is no error (the decoder replaces it). It looks
// at eight bytes at a time for the next quote, backslash, control byte or, while the string is
// plain, non-ASCII byte.
func scanValidString(data []byte, i int) (end int, plain, ok bool) {
	plain = true
	j := i + 1
	for {
		for j+8 <= len(data) {
			w := binary.LittleEndian.Uint64(data[j:])
			m := bytesEqual(w, '"') | bytesEqual(w, '\\') | bytesBelow(w, 0x20)
			if plain {
				m |= w & 0x8080808080808080
			}
			if m != 0 {
				j += bits.TrailingZeros64(m) / 8
				goto found
			}
			j += 8
		}
		for ; j < len(data); j++ {
			if c := data[j]; c == '"' || c == '\\' || c < 0x20 || (plain && c >= 0x80) {
				goto found
			}
		}
		return 0, false, false
	found:
		switch c := data[j]; {
		case c == '"':
			return j + 1, plain, true
		case c == '\\':
			plain = false
			if j+1 >= len(data) {
				return 0, false, false
			}
			switch data[j+1] {
			case '"', '\\', '/', 'b', 'f', 'n', 'r', 't':
				j += 2
			case 'u':
				if j+6 > len(data) || !isHex(data[j+2]) || !isHex(data[j+3]) || !isHex(data[j+4]) || !isHex(data[j+5]) {
					return 0, false, false
				}
				j += 6
			default:
				return 0, false, false
			}
		case c < 0x20:
			return 0, false, false
		default: // a non-ASCII byte
			plain = false
			j++
		}
	}
}

func isHex(c byte) bool {
	return c-'0' <= 9 || (c|0x20)-'a' <= 5
}

// bytesBelow has the high bit of each byte of w below b (b <= 0x80) set, and maybe of bytes above
// the first such one (a borrow), none below it.
func bytesBelow(w uint64, b byte) uint64 {
	const ones = 0x0101010101010101
	return (w - ones*uint64(b)) &^ w & 0x8080808080808080
}

// chunkField names the keys scanChunk reads.
type chunkField uint8

const (
	keyOther chunkField = iota
	keyChoices
	keyUsage
	keyType
	keyDelta
	keyText
	keyFinishReason
	keyContent
	keyReasoning
	keyReasoningContent
	keyToolCalls
)

// chunkKey says which field the plain quoted key raw names, matching as the decoder does: ASCII
// case does not matter. (A key with an escape or a non-ASCII byte, which may fold to an ASCII
// letter like U+017F to s, is left to the decoder.)
func chunkKey(raw []byte) chunkField {
	inner := raw[1 : len(raw)-1]
	var f chunkField
	var name string
	switch len(inner) {
	case 4:
		f, name = keyText, "text"
		if inner[1]|0x20 == 'y' {
			f, name = keyType, "type"
		}
	case 5:
		f, name = keyUsage, "usage"
		if inner[0]|0x20 == 'd' {
			f, name = keyDelta, "delta"
		}
	case 7:
		f, name = keyChoices, "choices"
		if inner[1]|0x20 == 'o' {
			f, name = keyContent, "content"
		}
	case 9:
		f, name = keyReasoning, "reasoning"
	case 10:
		f, name = keyToolCalls, "tool_calls"
	case 13:
		f, name = keyFinishReason, "finish_reason"
	case 17:
		f, name = keyReasoningContent, "reasoning_content"
	default:
		return keyOther
	}
	if !asciiEqualFold(inner, name) {
		return keyOther
	}
	return f
}

// asciiEqualFold reports whether b is s regardless of ASCII case; s is lower-case letters and
// underscores. c|0x20 is the lower case of a letter c, and never an underscore (0x5f lacks 0x20).
func asciiEqualFold(b []byte, s string) bool {
	if len(b) != len(s) {
		return false
	}
	for i := range len(s) {
		if c := b[i]; c != s[i] && c|0x20 != s[i] {
			return false
		}
	}
	return true
}

// streamChunk is the part of a completion or chat chunk the router reads, for the events Classify
// decodes (classifyDecoded). Members it does not read (a choice's logprobs, an error) are left
// out: the decoder validates and skips them instead of copying them.
type streamChunk struct {
	Choices []struct {
		Text         *string     `json:"text"`
		Delta        *chunkDelta `json:"delta"`
		FinishReason *string     `json:"finish_reason"`
	} `json:"choices"`
	Usage json.RawMessage `json:"usage"`
	// Type and Delta are a Responses API event's (responses.go).
	Type  string          `json:"type"`
	Delta json.RawMessage `json:"delta"`
}

type chunkDelta struct {
	Content          *string         `json:"content"`
	Reasoning        *string         `json:"reasoning"`
	ReasoningContent *string         `json:"reasoning_content"`
	ToolCalls        json.RawMessage `json:"tool_calls"`
}

// classifyDecoded is Classify by decoding, for what scanChunk leaves to it.
func classifyDecoded(data []byte) EventKind {
	var c streamChunk
	if err := json.Unmarshal(data, &c); err != nil {
		return EventMeta
	}
	if c.Type != "" && c.Choices == nil {
		return classifyResponses([]byte(c.Type), c.Delta)
	}
	for _, ch := range c.Choices {
		if ch.FinishReason != nil || (ch.Text != nil && *ch.Text != "") {
			return EventToken
		}
		if d := ch.Delta; d != nil {
			if nonEmpty(d.Content) || nonEmpty(d.Reasoning) || nonEmpty(d.ReasoningContent) ||
				(len(d.ToolCalls) > 2 && !IsNull(d.ToolCalls)) {
				return EventToken
			}
		}
	}
	if len(c.Choices) == 0 && len(c.Usage) > 0 && !IsNull(c.Usage) {
		return EventUsage
	}
	return EventMeta
}
