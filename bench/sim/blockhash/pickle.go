package blockhash

import (
	"encoding/binary"
	"fmt"
)

// Pickle opcodes (CPython Lib/pickle.py) used by protocol 5 for the values block hashes
// hash.
const (
	opProto          = 0x80
	opFrame          = 0x95
	opStop           = '.'
	opNone           = 'N'
	opBinInt1        = 'K'
	opBinInt2        = 'M'
	opBinInt         = 'J'
	opLong1          = 0x8a
	opShortBinBytes  = 'C'
	opBinBytes       = 'B'
	opShortBinUnicod = 0x8c
	opBinUnicode     = 'X'
	opEmptyTuple     = ')'
	opMark           = '('
	opTuple          = 't'
	opTuple1         = 0x85
	opMemoize        = 0x94
)

// frameTarget is CPython's _FRAME_SIZE_TARGET: a frame is closed at an opcode boundary once
// it reaches 64 KiB. Block-hash tuples are far smaller; Pickle refuses larger ones rather
// than frame them wrongly.
const frameTarget = 64 * 1024

// Pickle returns pickle.dumps(v, protocol=5) byte for byte as CPython's C pickler writes it:
// PROTO 5, one FRAME (8-byte little-endian length) around the body and STOP, MEMOIZE after
// every bytes, str and non-empty tuple (each a distinct object, so never a memo hit), ints in
// the shortest of BININT1/BININT2/BININT/LONG1.
func Pickle(v any) ([]byte, error) {
	body, err := pickleValue(nil, v)
	if err != nil {
		return nil, err
	}
	body = append(body, opStop)
	if len(body) >= frameTarget {
		return nil, fmt.Errorf("pickle: %d bytes need several frames", len(body))
	}
	out := []byte{opProto, 5}
	if len(body) >= 4 { // CPython's FRAME_SIZE_MIN: shorter bodies go unframed
		out = append(out, opFrame)
		out = binary.LittleEndian.AppendUint64(out, uint64(len(body)))
	}
	return append(out, body...), nil
}

func pickleValue(b []byte, v any) ([]byte, error) {
	switch x := v.(type) {
	case nil:
		return append(b, opNone), nil
	case int64:
		return pickleInt(b, x), nil
	case []byte:
		return pickleData(b, opShortBinBytes, opBinBytes, x), nil
	case string:
		return pickleData(b, opShortBinUnicod, opBinUnicode, []byte(x)), nil
	case Tuple:
		if len(x) == 0 {
			return append(b, opEmptyTuple), nil
		}
		if len(x) > 3 {
			b = append(b, opMark)
		}
		var err error
		for _, e := range x {
			if b, err = pickleValue(b, e); err != nil {
				return nil, err
			}
		}
		if len(x) > 3 {
			b = append(b, opTuple)
		} else {
			b = append(b, opTuple1+byte(len(x)-1)) // TUPLE1, TUPLE2, TUPLE3
		}
		return append(b, opMemoize), nil
	}
	return nil, fmt.Errorf("pickle: cannot encode %T", v)
}

// pickleData writes bytes or a str's UTF-8: the short opcode with a 1-byte length below 256
// bytes, else the long one with a 4-byte little-endian length; then MEMOIZE.
func pickleData(b []byte, short, long byte, data []byte) []byte {
	if len(data) < 256 {
		b = append(b, short, byte(len(data)))
	} else {
		b = binary.LittleEndian.AppendUint32(append(b, long), uint32(len(data)))
	}
	return append(append(b, data...), opMemoize)
}

func pickleInt(b []byte, x int64) []byte {
	switch {
	case x >= 0 && x <= 0xff:
		return append(b, opBinInt1, byte(x))
	case x >= 0 && x <= 0xffff:
		return binary.LittleEndian.AppendUint16(append(b, opBinInt2), uint16(x))
	case x >= -1<<31 && x < 1<<31:
		return binary.LittleEndian.AppendUint32(append(b, opBinInt), uint32(int32(x)))
	}
	// LONG1: little-endian two's complement, as few bytes as keep the sign.
	var le []byte
	for v := x; ; v >>= 8 {
		le = append(le, byte(v))
		if (v >= -128 && v < 128) && (v < 0) == (byte(v)&0x80 != 0) {
			break
		}
	}
	return append(append(b, opLong1, byte(len(le))), le...)
}
