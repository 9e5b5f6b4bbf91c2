package wire

import (
	"bytes"
	"errors"

	"github.com/goccy/go-json"
)

// Field is one top-level member of a JSON object, as byte offsets into the object's text.
type Field struct {
	keyStart, keyEnd int // the key including its quotes
	valStart, valEnd int // the value, whitespace trimmed
}

// The errors of ScanObject and SkipValue.
var (
	// ErrSyntax says the data is not valid JSON (what json.Valid refuses).
	ErrSyntax = errors.New("not valid JSON")
	// ErrNotObject says the data is valid JSON but no object.
	ErrNotObject = errors.New("not a JSON object")
)

// ScanObject lists the top-level members of the JSON object in data, in order, without
// decoding any value, and checks the whole of data as it goes: it fails with ErrSyntax for
// anything json.Valid refuses (trailing bytes after the object included) and with ErrNotObject
// for valid JSON that is no object, so no caller needs json.Valid first. It never panics. dst
// is appended to, to avoid allocating; on an error it is returned as it came.
func ScanObject(data []byte, dst []Field) ([]Field, error) {
	i := SkipSpace(data, 0)
	if i >= len(data) || data[i] != '{' {
		if end, st := skipValue(data, i, 0, maxNesting); st == scanOK && SkipSpace(data, end) == len(data) {
			return dst, ErrNotObject
		}
		return dst, ErrSyntax
	}
	n := len(dst)
	it := openItems(i)
	for {
		ks, ke, _, v, more := it.member(data)
		if !more {
			break
		}
		end, st := skipValue(data, v, 1, maxNesting)
		if st != scanOK {
			return dst[:n], ErrSyntax
		}
		dst = append(dst, Field{keyStart: ks, keyEnd: ke, valStart: v, valEnd: end})
		it.end = end
	}
	if it.bad || SkipSpace(data, it.end) != len(data) {
		return dst[:n], ErrSyntax
	}
	return dst, nil
}

// SkipValue returns the offset just past the JSON value starting at data[i] (no whitespace
// before it), checking its grammar: ErrSyntax if it is not valid JSON. What follows the value
// is the caller's to check.
func SkipValue(data []byte, i int) (int, error) {
	end, st := skipValue(data, i, 0, maxNesting)
	if st != scanOK {
		return 0, ErrSyntax
	}
	return end, nil
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
	dst = append(dst, '{')
	first := true
	rewriteMembers(data, fields, edits, func(rawKey []byte, key string, value []byte) {
		dst = appendMember(dst, &first, rawKey, key, value)
	})
	return append(dst, '}')
}

// rewriteMembers calls emit for each member of the rewritten object, in order: a member kept
// (its key as sent, rawKey, and its value) or one an edit adds (rawKey nil, key unquoted).
func rewriteMembers(data []byte, fields []Field, edits []Edit, emit func(rawKey []byte, key string, value []byte)) {
	var done [8]bool // which edits were applied in place
	if len(edits) > len(done) {
		panic("wire: RewriteObject supports at most 8 edits")
	}
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
			emit(raw, "", data[f.valStart:f.valEnd])
			continue
		}
		if edits[ei].Value == nil || laterDuplicate(data, fields[fi+1:], edits[ei].Key) {
			continue
		}
		emit(raw, "", edits[ei].Value)
		done[ei] = true
	}
	for j, e := range edits {
		if done[j] || e.Value == nil || e.OnlyIfPresent {
			continue
		}
		emit(nil, e.Key, e.Value)
	}
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
