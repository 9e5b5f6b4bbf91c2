package blockhash

import (
	"encoding/binary"
	"fmt"
)

// CBOR returns cbor2.dumps(v, canonical=True) for the values block hashes hash (RFC 8949):
// a tuple is an array, bytes a byte string, str a text string, an int the shortest head of
// major type 0 or 1, None the simple value null (0xf6).
func CBOR(v any) ([]byte, error) { return cborValue(nil, v) }

func cborValue(b []byte, v any) ([]byte, error) {
	switch x := v.(type) {
	case nil:
		return append(b, 0xf6), nil
	case int64:
		if x >= 0 {
			return cborHead(b, 0, uint64(x)), nil
		}
		return cborHead(b, 1, uint64(-1-x)), nil
	case []byte:
		return append(cborHead(b, 2, uint64(len(x))), x...), nil
	case string:
		return append(cborHead(b, 3, uint64(len(x))), x...), nil
	case Tuple:
		b = cborHead(b, 4, uint64(len(x)))
		var err error
		for _, e := range x {
			if b, err = cborValue(b, e); err != nil {
				return nil, err
			}
		}
		return b, nil
	}
	return nil, fmt.Errorf("cbor: cannot encode %T", v)
}

func cborHead(b []byte, major byte, n uint64) []byte {
	m := major << 5
	switch {
	case n < 24:
		return append(b, m|byte(n))
	case n <= 0xff:
		return append(b, m|24, byte(n))
	case n <= 0xffff:
		return binary.BigEndian.AppendUint16(append(b, m|25), uint16(n))
	case n <= 0xffffffff:
		return binary.BigEndian.AppendUint32(append(b, m|26), uint32(n))
	}
	return binary.BigEndian.AppendUint64(append(b, m|27), n)
}
