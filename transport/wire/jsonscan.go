package wire

import (
	"bytes"
	"encoding/binary"
	"errors"
	"math/bits"

	"github.com/goccy/go-json"
)

// Field is one top-level member of a JSON object, as byte offsets into the object's text.
type Field struct {
	keyStart, keyEnd int // the key including its quotes
	valStart, valEnd int // the value, whitespace trimmed
}

var errNotObject = errors.New("not a JSON object")

// ScanObject lists the top-level members of the JSON object in data, in order, without
// decoding any value. data must already be valid JSON (json.Valid); on anything else it returns
// an error rather than panicking. dst is reused to avoid allocating.
func ScanObject(data []byte, dst []Field) ([]Field, error) {
	i := SkipSpace(data, 0)
	if i >= len(data) || data[i] != '{' {
		return dst, errNotObject
	}
	i = SkipSpace(data, i+1)
	if i < len(data) && data[i] == '}' {
		return dst, nil
	}
	for {
		if i >= len(data) || data[i] != '"' {
			return dst, errNotObject
		}
		var f Field
		f.keyStart = i
		end, err := skipString(data, i)
		if err != nil {
			return dst, err
		}
		f.keyEnd = end
		i = SkipSpace(data, end)
		if i >= len(data) || data[i] != ':' {
			return dst, errNotObject
		}
		i = SkipSpace(data, i+1)
		f.valStart = i
		end, err = SkipValue(data, i)
		if err != nil {
			return dst, err
		}
		f.valEnd = end
		dst = append(dst, f)
		i = SkipSpace(data, end)
		if i >= len(data) {
			return dst, errNotObject
		}
		switch data[i] {
		case ',':
			i = SkipSpace(data, i+1)
		case '}':
			return dst, nil
		default:
			return dst, errNotObject
		}
	}
}

// SkipSpace returns the offset of the first non-whitespace byte at or after i.
func SkipSpace(data []byte, i int) int {
	for i < len(data) {
		switch data[i] {
		case ' ', '\t', '\n', '\r':
			i++
		default:
			return i
		}
	}
	return i
}

// skipString returns the offset just past the string starting at data[i] == '"': the first quote
// not escaped by a backslash (a backslash escapes the byte after it). It looks at eight bytes at a
// time for the next quote or backslash (SWAR), which costs less than a loop over every byte.
func skipString(data []byte, i int) (int, error) {
	j := i + 1
	for {
		for j+8 <= len(data) {
			w := binary.LittleEndian.Uint64(data[j:])
			if m := bytesEqual(w, '"') | bytesEqual(w, '\\'); m != 0 {
				j += bits.TrailingZeros64(m) / 8
				goto found
			}
			j += 8
		}
		for ; j < len(data); j++ {
			if c := data[j]; c == '"' || c == '\\' {
				goto found
			}
		}
		return 0, errNotObject
	found:
		if data[j] == '"' {
			return j + 1, nil
		}
		j += 2 // the escaped byte is no quote
	}
}

// bytesEqual has the high bit of each byte of w that is b set, and maybe of bytes above the first
// such one (a borrow), none below it: the lowest set bit finds the first b.
func bytesEqual(w uint64, b byte) uint64 {
	const ones = 0x0101010101010101
	x := w ^ (ones * uint64(b))
	return (x - ones) &^ x & 0x8080808080808080
}

// SkipValue returns the offset just past the JSON value starting at data[i].
func SkipValue(data []byte, i int) (int, error) {
	if i >= len(data) {
		return 0, errNotObject
	}
	switch data[i] {
	case '"':
		return skipString(data, i)
	case '{', '[':
		depth := 0
		for j := i; j < len(data); j++ {
			switch data[j] {
			case '"':
				end, err := skipString(data, j)
				if err != nil {
					return 0, err
				}
				j = end - 1
			case '{', '[':
				depth++
			case '}', ']':
				depth--
				if depth == 0 {
					return j + 1, nil
				}
			}
		}
		return 0, errNotObject
	default: // number, true, false, null
		j := i
		for j < len(data) {
			switch data[j] {
			case ',', '}', ']', ' ', '\t', '\n', '\r':
				return j, nil
			}
			j++
		}
		return j, nil
	}
}

// keyIs reports whether the quoted key raw names want. Keys are compared after JSON unescaping,
// so `"kv_transfer_param\u0073"` cannot slip past a filter that looks for kv_transfer_params:
// the engine's JSON parser would read it as the real key.
func keyIs(raw []byte, want string) bool {
	inner := raw[1 : len(raw)-1]
	if bytes.IndexByte(inner, '\\') < 0 {
		return string(inner) == want
	}
	var s string
	if err := json.Unmarshal(raw, &s); err != nil {
		return false
	}
	return s == want
}

// lastField returns the last member named key (JSON parsers keep the last of duplicate keys,
// so the router must read the same one the engine will).
func lastField(data []byte, fields []Field, key string) (Field, bool) {
	for i := len(fields) - 1; i >= 0; i-- {
		if keyIs(data[fields[i].keyStart:fields[i].keyEnd], key) {
			return fields[i], true
		}
	}
	return Field{}, false
}

// Edit is one change to a top-level member: drop it, or replace its value with raw JSON.
type Edit struct {
	Key string
	// Value is the replacement JSON; nil drops the key.
	Value []byte
	// OnlyIfPresent skips adding the key when the object does not have it.
	OnlyIfPresent bool
}

// RewriteObject appends to dst the object data with edits applied: a replaced key keeps its
// position (its last occurrence; earlier duplicates are dropped), absent keys are appended in
// Edit order, and every other member is copied byte for byte.
func RewriteObject(dst, data []byte, fields []Field, edits []Edit) []byte {
	var done [8]bool // which edits were applied in place
	if len(edits) > len(done) {
		panic("wire: RewriteObject supports at most 8 edits")
	}
	dst = append(dst, '{')
	first := true
	for fi, f := range fields {
		raw := data[f.keyStart:f.keyEnd]
		ei := -1
		for j := range edits {
			if keyIs(raw, edits[j].Key) {
				ei = j
				break
			}
		}
		if ei < 0 {
			dst = appendMember(dst, &first, raw, "", data[f.valStart:f.valEnd])
			continue
		}
		if edits[ei].Value == nil || laterDuplicate(data, fields[fi+1:], edits[ei].Key) {
			continue
		}
		dst = appendMember(dst, &first, raw, "", edits[ei].Value)
		done[ei] = true
	}
	for j, e := range edits {
		if done[j] || e.Value == nil || e.OnlyIfPresent {
			continue
		}
		dst = appendMember(dst, &first, nil, e.Key, e.Value)
	}
	return append(dst, '}')
}

func laterDuplicate(data []byte, rest []Field, key string) bool {
	for _, f := range rest {
		if keyIs(data[f.keyStart:f.keyEnd], key) {
			return true
		}
	}
	return false
}

func appendMember(dst []byte, first *bool, rawKey []byte, key string, value []byte) []byte {
	if !*first {
		dst = append(dst, ',')
	}
	*first = false
	if rawKey != nil {
		dst = append(dst, rawKey...)
	} else {
		dst = append(dst, '"')
		dst = append(dst, key...)
		dst = append(dst, '"')
	}
	dst = append(dst, ':')
	return append(dst, value...)
}

// Member returns the raw value of the last member named key of the object data, whose members
// fields lists (ScanObject).
func Member(data []byte, fields []Field, key string) ([]byte, bool) {
	f, ok := lastField(data, fields, key)
	if !ok {
		return nil, false
	}
	return data[f.valStart:f.valEnd], true
}
