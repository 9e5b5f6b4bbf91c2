package wire

import (
	"encoding/binary"
	"math/bits"
)

// The JSON grammar (RFC 8259) every scanner of this package is built on. Nothing here decodes:
// each function checks the grammar of what it passes over and returns offsets into the caller's
// bytes. It accepts exactly what json.Valid (goccy/go-json) accepts, so a scan needs no
// json.Valid pass before it (FuzzScanObjectMatchesValid holds it to that): invalid UTF-8 inside
// a string is no error (the decoder replaces it), and nesting deeper than maxNesting levels is.

// scanStatus is how a scan ended.
type scanStatus uint8

const (
	scanOK   scanStatus = iota
	scanBad             // not JSON
	scanDeep            // JSON nested deeper than the caller's bound allows
)

// maxNesting is json.Valid's bound on nesting (objects and arrays open at once); a deeper
// document is no valid JSON to it, nor to the scanners here.
const maxNesting = 10000

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

// skipValue returns the offset past the JSON value at data[i], which is nested depth containers
// deep, checking its grammar: scanBad if it is not JSON, scanDeep if a container in it would be
// open with limit others around it. It is one loop of gotos with its state in a word (bit l of
// objects is set if the container open at level l is an object), so skipping allocates nothing;
// a container deeper than the word's 64 levels is skipped by a call of its own.
func skipValue(data []byte, i, depth, limit int) (int, scanStatus) {
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
		if depth+level >= limit || level == 64 {
			if depth+level >= limit {
				return 0, scanDeep
			}
			var st scanStatus // level 64: no bit of objects is left for it
			if i, st = skipValue(data, i, depth+level, limit); st != scanOK {
				return 0, st
			}
			goto next
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
		if i, _, ok = scanString(data, i); !ok {
			return 0, scanBad
		}
	case 't':
		i, ok = literal(data, i, "true")
	case 'f':
		i, ok = literal(data, i, "false")
	case 'n':
		i, ok = literal(data, i, "null")
	case '1', '2', '3', '4', '5', '6', '7', '8', '9':
		// an integer, which most numbers are (block ids, counts, indexes), without a call
		j := skipDigits(data, i+1)
		if j < len(data) && (data[j] == '.' || data[j]|0x20 == 'e') {
			i, ok = scanNumber(data, i)
		} else {
			i, ok = j, true
		}
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
	end, _, ok := scanString(data, i)
	if !ok {
		return 0, false
	}
	if i = SkipSpace(data, end); i >= len(data) || data[i] != ':' {
		return 0, false
	}
	return SkipSpace(data, i+1), true
}

// items walks the members of an object or the elements of an array, checking the separators
// between them: the one way the scanners here read a container whose values they look at
// (ScanObject, and Classify's chunk, choice and delta objects). The caller reads each value
// itself (a skip, or a read of its own) and sets end past it:
//
//	it := openItems(i) // data[i] is '{'
//	for {
//		keyStart, keyEnd, plain, v, more := it.member(data)
//		if !more {
//			break
//		}
//		it.end, st = skipValue(data, v, depth, limit) // or any read of data[v:]
//	}
//	if it.bad { ... } // else it.end is past the '}'
//
// What the walk finds is returned, not kept in the struct, so that it stays in registers, and
// member and element each check the separators rather than share a function for it: Classify,
// which runs on every event before a stream's first token, measured a few percent slower with
// the results in memory, with a shared call, or with one function for both kinds of container.
type items struct {
	// end is where the next read starts: past the opening bracket, then past the value the
	// caller read, and after the last item past the closing bracket.
	end   int
	first bool
	// bad says the walk stopped at a syntax error, not at the container's end.
	bad bool
}

// openItems starts on the container whose opening bracket is at offset i.
func openItems(i int) items { return items{end: i + 1, first: true} }

// member moves to the next member of an object: the offsets of its key (quotes included),
// whether the key is plain (no escape, ASCII only) and the offset of its value. more is false at
// the object's end or at a syntax error (bad). A '}' after a comma is refused as no key.
func (it *items) member(data []byte) (keyStart, keyEnd int, plain bool, val int, more bool) {
	i := SkipSpace(data, it.end)
	if i >= len(data) {
		it.bad = true
		return 0, 0, false, 0, false
	}
	if data[i] == '}' {
		it.end = i + 1
		return 0, 0, false, 0, false
	}
	if !it.first {
		if data[i] != ',' {
			it.bad = true
			return 0, 0, false, 0, false
		}
		if i = SkipSpace(data, i+1); i >= len(data) {
			it.bad = true
			return 0, 0, false, 0, false
		}
	}
	it.first = false
	if data[i] != '"' {
		it.bad = true
		return 0, 0, false, 0, false
	}
	end, plain, ok := scanString(data, i)
	if !ok {
		it.bad = true
		return 0, 0, false, 0, false
	}
	j := SkipSpace(data, end)
	if j >= len(data) || data[j] != ':' {
		it.bad = true
		return 0, 0, false, 0, false
	}
	if j = SkipSpace(data, j+1); j >= len(data) {
		it.bad = true
		return 0, 0, false, 0, false
	}
	return i, end, plain, j, true
}

// element moves to the next element of an array: the offset of its value (more is false at the
// array's end or at a syntax error, bad). A ']' after a comma is returned as a value, which the
// caller's read refuses.
func (it *items) element(data []byte) (val int, more bool) {
	i := SkipSpace(data, it.end)
	if i >= len(data) {
		it.bad = true
		return 0, false
	}
	if data[i] == ']' {
		it.end = i + 1
		return 0, false
	}
	if !it.first {
		if data[i] != ',' {
			it.bad = true
			return 0, false
		}
		if i = SkipSpace(data, i+1); i >= len(data) {
			it.bad = true
			return 0, false
		}
	}
	it.first = false
	return i, true
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

// scanString returns the offset past the string at data[i] == '"' and whether it is plain (no
// escape, ASCII only); ok is false for a string the grammar refuses: a control byte, an unknown
// escape, no closing quote. Invalid UTF-8 is no error (the decoder replaces it). It looks at
// eight bytes at a time for the next quote, backslash, control byte or, while the string is
// plain, non-ASCII byte (SWAR), which costs less than a loop over every byte.
func scanString(data []byte, i int) (end int, plain, ok bool) {
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

// bytesEqual has the high bit of each byte of w that is b set, and maybe of bytes above the first
// such one (a borrow), none below it: the lowest set bit finds the first b.
func bytesEqual(w uint64, b byte) uint64 {
	const ones = 0x0101010101010101
	x := w ^ (ones * uint64(b))
	return (x - ones) &^ x & 0x8080808080808080
}

// bytesBelow has the high bit of each byte of w below b (b <= 0x80) set, and maybe of bytes above
// the first such one (a borrow), none below it.
func bytesBelow(w uint64, b byte) uint64 {
	const ones = 0x0101010101010101
	return (w - ones*uint64(b)) &^ w & 0x8080808080808080
}
