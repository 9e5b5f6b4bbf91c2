package wire

import (
	"bytes"

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
	case scanDeep, scanDecode:
		return classifyDecoded(data)
	}
	return EventMeta // the decoder fails on it
}

// scanDecode is scanChunk's status for a shape only the decoder classifies exactly (beside the
// grammar's scanOK, scanBad — the decoder fails — and scanDeep, which is decoded too).
const scanDecode = scanDeep + 1

// maxScanDepth is the nesting scanChunk follows; a deeper document is decoded (the decoder's own
// bound is maxNesting).
const maxScanDepth = 64

// scanChunk classifies data in place, checking the JSON grammar as it goes (jsongrammar.go).
// It reads the members it needs and skips the others; a type error in one it reads is scanBad,
// as the decoder fails on it.
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
		ok         bool
		st         scanStatus
	)
	m := openItems(i)
	for {
		ks, ke, plain, v, more := m.member(data)
		if !more {
			break
		}
		if !plain {
			return 0, scanDecode
		}
		switch chunkKey(data[ks:ke]) {
		case keyChoices:
			if choices {
				return 0, scanDecode // decoded into the first array's elements and spare capacity
			}
			choices = true
			switch data[v] {
			case 'n':
				if m.end, ok = literal(data, v, "null"); !ok {
					return 0, scanBad
				}
				continue
			case '[':
			default:
				return 0, scanBad
			}
			choicesNil = false
			if m.end, choicesLen, token, st = scanChoices(data, v); st != scanOK {
				return 0, st
			}
		case keyType:
			switch data[v] {
			case 'n':
				if m.end, ok = literal(data, v, "null"); !ok {
					return 0, scanBad
				}
			case '"':
				if m.end, _, ok = scanString(data, v); !ok {
					return 0, scanBad
				}
				typ = data[v:m.end]
			default:
				return 0, scanBad
			}
		case keyUsage:
			if m.end, st = skipValue(data, v, 1, maxScanDepth); st != scanOK {
				return 0, st
			}
			usage = data[v:m.end]
		case keyDelta:
			if m.end, st = skipValue(data, v, 1, maxScanDepth); st != scanOK {
				return 0, st
			}
			dlt = data[v:m.end]
		default:
			if m.end, st = skipValue(data, v, 1, maxScanDepth); st != scanOK {
				return 0, st
			}
		}
	}
	if m.bad || SkipSpace(data, m.end) != len(data) {
		return 0, scanBad // a syntax error, or more after the object
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

// scanChoices reads the "choices" array at data[i] == '[' (nested two deep): the offset past it,
// how many elements it has and whether one carries output.
func scanChoices(data []byte, i int) (end, n int, token bool, st scanStatus) {
	e := openItems(i)
	for {
		v, more := e.element(data)
		if !more {
			break
		}
		n++
		switch data[v] {
		case 'n': // a zero element
			var ok bool
			if e.end, ok = literal(data, v, "null"); !ok {
				return 0, 0, false, scanBad
			}
		case '{':
			var t bool
			if t, e.end, st = scanChoice(data, v); st != scanOK {
				return 0, 0, false, st
			}
			token = token || t
		default:
			return 0, 0, false, scanBad
		}
	}
	if e.bad {
		return 0, 0, false, scanBad
	}
	return e.end, n, token, scanOK
}

// scanChoice reads the element of "choices" at data[i] == '{' (nested three deep): whether it
// carries output and the offset past it.
func scanChoice(data []byte, i int) (token bool, end int, st scanStatus) {
	var (
		text, finish bool
		delta        bool // a delta object is open: a second one is decoded into it
		d            deltaOutput
		ok           bool
	)
	m := openItems(i)
	for {
		ks, ke, plain, v, more := m.member(data)
		if !more {
			break
		}
		if !plain {
			return false, 0, scanDecode
		}
		switch chunkKey(data[ks:ke]) {
		case keyText:
			if text, m.end, ok = stringValue(data, v); !ok {
				return false, 0, scanBad
			}
		case keyFinishReason:
			if _, m.end, ok = stringValue(data, v); !ok {
				return false, 0, scanBad
			}
			finish = data[v] == '"' // an empty reason is a reason too
		case keyDelta:
			switch data[v] {
			case 'n': // the pointer is reset; a later object is a new delta
				if m.end, ok = literal(data, v, "null"); !ok {
					return false, 0, scanBad
				}
				delta = false
				continue
			case '{':
			default:
				return false, 0, scanBad
			}
			if !delta { // a new delta; a second object is decoded into the same one
				delta, d = true, deltaOutput{}
			}
			if m.end, st = d.scan(data, v); st != scanOK {
				return false, 0, st
			}
		default:
			if m.end, st = skipValue(data, v, 3, maxScanDepth); st != scanOK {
				return false, 0, st
			}
		}
	}
	if m.bad {
		return false, 0, scanBad
	}
	return finish || text || (delta && d.any()), m.end, scanOK
}

// deltaOutput is which members of a choice's delta carry output, as decoding into chunkDelta
// sees them.
type deltaOutput struct{ content, reasoning, reasoningContent, toolCalls bool }

func (d *deltaOutput) any() bool {
	return d.content || d.reasoning || d.reasoningContent || d.toolCalls
}

// scan reads the delta object at data[i] == '{' (nested four deep) into d and returns the
// offset past it.
func (d *deltaOutput) scan(data []byte, i int) (int, scanStatus) {
	m := openItems(i)
	for {
		ks, ke, plain, v, more := m.member(data)
		if !more {
			break
		}
		if !plain {
			return 0, scanDecode
		}
		var p *bool
		switch chunkKey(data[ks:ke]) {
		case keyContent:
			p = &d.content
		case keyReasoning:
			p = &d.reasoning
		case keyReasoningContent:
			p = &d.reasoningContent
		case keyToolCalls:
			var st scanStatus
			if m.end, st = skipValue(data, v, 4, maxScanDepth); st != scanOK {
				return 0, st
			}
			d.toolCalls = m.end-v > 2 && !IsNull(data[v:m.end]) // as the decoder's raw bytes are read
			continue
		default:
			var st scanStatus
			if m.end, st = skipValue(data, v, 4, maxScanDepth); st != scanOK {
				return 0, st
			}
			continue
		}
		var ok bool
		if *p, m.end, ok = stringValue(data, v); !ok {
			return 0, scanBad
		}
	}
	if m.bad {
		return 0, scanBad
	}
	return m.end, scanOK
}

// stringValue reads the *string member at data[i]: whether it decodes to a non-empty string
// (null and "" do not) and the offset past it; ok is false for anything but a string or null.
func stringValue(data []byte, i int) (nonEmpty bool, end int, ok bool) {
	switch data[i] {
	case 'n':
		end, ok = literal(data, i, "null")
		return false, end, ok
	case '"':
		end, _, ok = scanString(data, i)
		return end-i > 2, end, ok // any escape decodes to one byte at least
	}
	return false, 0, false
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
