package kvevents

import (
	"encoding/binary"
	"errors"
	"fmt"
	"math"
)

// reader is a msgpack reader over one payload held in memory, for bytes a publisher chose: every
// length a header claims is checked against the bytes actually left before anything is made for
// it, a string or bytes value is a slice of the payload (never a copy), and skipping a value is a
// loop, not a recursion, so neither a claimed size nor a deep nesting costs more than the
// payload's own length. It reads the subset msgpack has (there are no others): nil, booleans,
// integers, floats, str, bin, arrays, maps and ext values (skipped).
type reader struct {
	b []byte
	i int
}

var errTruncated = errors.New("truncated")

// left is how many bytes are not read yet.
func (r *reader) left() int { return len(r.b) - r.i }

func (r *reader) peek() (byte, error) {
	if r.i >= len(r.b) {
		return 0, errTruncated
	}
	return r.b[r.i], nil
}

// take returns the next n bytes (a slice of the payload).
func (r *reader) take(n uint64) ([]byte, error) {
	if n > uint64(r.left()) {
		return nil, fmt.Errorf("a value claims %d bytes, %d are left: %w", n, r.left(), errTruncated)
	}
	s := r.b[r.i : r.i+int(n)]
	r.i += int(n)
	return s, nil
}

// size reads a big-endian length of width bytes (1, 2, 4 or 8).
func (r *reader) size(width int) (uint64, error) {
	s, err := r.take(uint64(width))
	if err != nil {
		return 0, err
	}
	switch width {
	case 1:
		return uint64(s[0]), nil
	case 2:
		return uint64(binary.BigEndian.Uint16(s)), nil
	case 4:
		return uint64(binary.BigEndian.Uint32(s)), nil
	}
	return binary.BigEndian.Uint64(s), nil
}

// container reads an array (map false) or map header and returns its element count, which is
// checked against the bytes left (every element takes at least one) and limit.
func (r *reader) container(isMap bool, limit int) (int, error) {
	c, err := r.peek()
	if err != nil {
		return 0, err
	}
	r.i++
	var n uint64
	switch {
	case !isMap && c&0xf0 == 0x90:
		n = uint64(c & 0x0f)
	case isMap && c&0xf0 == 0x80:
		n = uint64(c & 0x0f)
	case !isMap && (c == 0xdc || c == 0xdd), isMap && (c == 0xde || c == 0xdf):
		if n, err = r.size(2 << (c & 1)); err != nil {
			return 0, err
		}
	default:
		r.i--
		if isMap {
			return 0, fmt.Errorf("want a map, got code %#x", c)
		}
		return 0, fmt.Errorf("want an array, got code %#x", c)
	}
	per := uint64(1)
	if isMap {
		per = 2
	}
	if n*per > uint64(r.left()) {
		return 0, fmt.Errorf("a container claims %d elements, %d bytes are left: %w", n, r.left(), errTruncated)
	}
	if n > uint64(limit) {
		return 0, fmt.Errorf("a container of %d elements, at most %d are accepted", n, limit)
	}
	return int(n), nil
}

func (r *reader) arrayLen(limit int) (int, error) { return r.container(false, limit) }
func (r *reader) mapLen(limit int) (int, error)   { return r.container(true, limit) }

// isMap says whether the next value is a map.
func (r *reader) isMap() bool {
	c, err := r.peek()
	return err == nil && (c&0xf0 == 0x80 || c == 0xde || c == 0xdf)
}

// isStr says whether the next value is a string (not bytes).
func (r *reader) isStr() bool {
	c, err := r.peek()
	return err == nil && (c&0xe0 == 0xa0 || (c >= 0xd9 && c <= 0xdb))
}

// isNil says whether the next value is nil; isRaw whether it is a str or bin.
func (r *reader) isNil() bool {
	c, err := r.peek()
	return err == nil && c == 0xc0
}

func (r *reader) isRaw() bool {
	c, err := r.peek()
	return err == nil && (c&0xe0 == 0xa0 || (c >= 0xd9 && c <= 0xdb) || (c >= 0xc4 && c <= 0xc6))
}

// raw reads a str or bin value of at most limit bytes, as a slice of the payload.
func (r *reader) raw(limit int) ([]byte, error) {
	c, err := r.peek()
	if err != nil {
		return nil, err
	}
	r.i++
	var n uint64
	switch {
	case c&0xe0 == 0xa0:
		n = uint64(c & 0x1f)
	case c == 0xd9 || c == 0xc4:
		n, err = r.size(1)
	case c == 0xda || c == 0xc5:
		n, err = r.size(2)
	case c == 0xdb || c == 0xc6:
		n, err = r.size(4)
	default:
		r.i--
		return nil, fmt.Errorf("want a string, got code %#x", c)
	}
	if err != nil {
		return nil, err
	}
	if n > uint64(limit) && n <= uint64(r.left()) {
		return nil, fmt.Errorf("a string of %d bytes, at most %d are accepted", n, limit)
	}
	return r.take(n)
}

// uint reads an integer as its 64 bits: a negative one keeps its two's complement bits (a
// signed 64-bit block hash is the same hash).
func (r *reader) uint() (uint64, error) {
	c, err := r.peek()
	if err != nil {
		return 0, err
	}
	r.i++
	switch {
	case c <= 0x7f:
		return uint64(c), nil
	case c >= 0xe0:
		return uint64(int64(int8(c))), nil
	case c >= 0xcc && c <= 0xcf:
		return r.size(1 << (c - 0xcc))
	case c >= 0xd0 && c <= 0xd3:
		v, err := r.size(1 << (c - 0xd0))
		if err != nil {
			return 0, err
		}
		switch c {
		case 0xd0:
			v = uint64(int64(int8(v)))
		case 0xd1:
			v = uint64(int64(int16(v)))
		case 0xd2:
			v = uint64(int64(int32(v)))
		}
		return v, nil
	}
	r.i--
	return 0, fmt.Errorf("want an integer, got code %#x", c)
}

func (r *reader) int() (int64, error) {
	v, err := r.uint()
	return int64(v), err
}

// float reads a float, or an integer as one.
func (r *reader) float() (float64, error) {
	c, err := r.peek()
	if err != nil {
		return 0, err
	}
	switch c {
	case 0xca:
		r.i++
		v, err := r.size(4)
		return float64(math.Float32frombits(uint32(v))), err
	case 0xcb:
		r.i++
		v, err := r.size(8)
		return math.Float64frombits(v), err
	}
	if c >= 0xd0 && c <= 0xd3 || c >= 0xe0 {
		v, err := r.int()
		return float64(v), err
	}
	v, err := r.uint()
	return float64(v), err
}

// skip steps over one value, however nested, without recursion: pending counts the values still
// to step over, and each must take at least one of the bytes left.
func (r *reader) skip() error {
	for pending := uint64(1); pending > 0; pending-- {
		if pending > uint64(r.left()) {
			return fmt.Errorf("%d values claimed, %d bytes are left: %w", pending, r.left(), errTruncated)
		}
		c := r.b[r.i]
		r.i++
		var n uint64 // bytes to step over
		var err error
		switch {
		case c <= 0x7f || c >= 0xe0 || c == 0xc0 || c == 0xc2 || c == 0xc3:
		case c&0xf0 == 0x80:
			pending += 2 * uint64(c&0x0f)
		case c&0xf0 == 0x90:
			pending += uint64(c & 0x0f)
		case c&0xe0 == 0xa0:
			n = uint64(c & 0x1f)
		case c == 0xc4 || c == 0xd9:
			n, err = r.size(1)
		case c == 0xc5 || c == 0xda:
			n, err = r.size(2)
		case c == 0xc6 || c == 0xdb:
			n, err = r.size(4)
		case c == 0xc7, c == 0xc8, c == 0xc9: // ext 8, 16, 32: a length, a type byte, the data
			n, err = r.size(1 << (c - 0xc7))
			n++
		case c == 0xca:
			n = 4
		case c == 0xcb:
			n = 8
		case c >= 0xcc && c <= 0xcf:
			n = 1 << (c - 0xcc)
		case c >= 0xd0 && c <= 0xd3:
			n = 1 << (c - 0xd0)
		case c >= 0xd4 && c <= 0xd8: // fixext 1, 2, 4, 8, 16: a type byte, the data
			n = 1 + 1<<(c-0xd4)
		case c == 0xdc || c == 0xdd:
			var k uint64
			k, err = r.size(2 << (c & 1))
			pending += k
		case c == 0xde || c == 0xdf:
			var k uint64
			k, err = r.size(2 << (c & 1))
			pending += 2 * k
		default:
			return fmt.Errorf("code %#x is not msgpack", c)
		}
		if err != nil {
			return err
		}
		if _, err := r.take(n); err != nil {
			return err
		}
	}
	return nil
}
