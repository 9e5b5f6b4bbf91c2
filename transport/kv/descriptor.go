package kv

import (
	"bytes"
	"fmt"
	"strconv"
	"unicode/utf8"
	"unsafe"

	"github.com/narwhal-router/narwhal/transport/wire"
)

// Descriptor is a producer's handoff descriptor (its kv_transfer_params). The router never
// re-encodes it: Raw is forwarded to the consumer exactly as the producer sent it, unknown fields
// and key order included; the index of its members exists only to validate it.
type Descriptor struct {
	raw      []byte
	fields   []wire.Field
	endpoint wire.Endpoint
}

// maxDescriptorBytes bounds a descriptor; real ones are a few hundred bytes to a few KiB.
const maxDescriptorBytes = 1 << 20

// ParseDescriptor indexes raw, a JSON object the producer returned for an endpoint, checking that
// it is one: anything else, invalid JSON included, is rejected. raw is referenced, not copied.
func ParseDescriptor(raw []byte, ep wire.Endpoint) (*Descriptor, *Rejection) {
	if len(raw) > maxDescriptorBytes {
		return nil, Reject(ReasonDescriptorTooLarge, "descriptor is %d bytes, more than the 1 MiB any connector sends", len(raw))
	}
	fields, err := wire.ScanObject(raw, make([]wire.Field, 0, 16))
	if err != nil {
		return nil, Reject(ReasonConnectorMismatch, "kv_transfer_params is not a JSON object")
	}
	return &Descriptor{raw: raw, fields: fields, endpoint: ep}, nil
}

// Raw is the descriptor as the producer sent it.
func (d *Descriptor) Raw() []byte { return d.raw }

// Member returns the raw value of the last member named key.
func (d *Descriptor) Member(key string) ([]byte, bool) {
	return wire.Member(d.raw, d.fields, key)
}

// StringMember returns the member as a Go string; ok is false if it is absent or not a string.
func (d *Descriptor) StringMember(key string) (string, bool) {
	v, ok := d.Member(key)
	if !ok || len(v) < 2 || v[0] != '"' {
		return "", false
	}
	s, err := strconv.Unquote(string(v))
	if err != nil {
		return "", false
	}
	return s, true
}

// stringView is StringMember without a copy when the member has no escapes: the string shares
// the descriptor's bytes, so it is valid only while they are and must not be kept (Validate
// compares and formats it, nothing more). Saves an allocation per member per handoff.
func (d *Descriptor) stringView(key string) (string, bool) {
	v, ok := d.Member(key)
	if !ok || len(v) < 2 || v[0] != '"' || v[len(v)-1] != '"' {
		return "", false
	}
	in := v[1 : len(v)-1]
	if bytes.IndexByte(in, '\\') < 0 && bytes.IndexByte(in, '"') < 0 && bytes.IndexByte(in, '\n') < 0 && utf8.Valid(in) {
		return unsafe.String(unsafe.SliceData(in), len(in)), true // what strconv.Unquote returns for it
	}
	return d.StringMember(key)
}

// intMember returns the member as an integer; ok is false if it is absent or not an integer.
func (d *Descriptor) intMember(key string) (int64, bool) {
	v, ok := d.Member(key)
	if !ok {
		return 0, false
	}
	n, err := strconv.ParseInt(string(v), 10, 64)
	return n, err == nil
}

// Block ID bounds: a 1M-token context in 16-token blocks is 65,536 blocks per KV group.
const (
	maxBlockIDs   = 1 << 18
	maxBlockGroup = 64
)

// checkBlockIDs accepts a non-empty array of non-negative integers, or a non-empty array of such
// arrays (one per KV-cache group), within the bounds above. It scans without allocating.
func checkBlockIDs(v []byte) *Rejection {
	bad := func(format string, args ...any) *Rejection {
		return Reject(ReasonMalformedBlockIDs, "remote_block_ids "+format, args...)
	}
	if len(v) == 0 || v[0] != '[' {
		return bad("must be an array, got %s", excerpt(v))
	}
	i := wire.SkipSpace(v, 1)
	if i < len(v) && v[i] == ']' {
		return bad("is empty")
	}
	grouped := i < len(v) && v[i] == '['
	total, groups := 0, 0
	for i < len(v) {
		if grouped {
			if v[i] != '[' {
				return bad("mixes block ids and groups at element %d", groups)
			}
			if groups++; groups > maxBlockGroup {
				return bad("has more than %d groups", maxBlockGroup)
			}
			j := wire.SkipSpace(v, i+1)
			if j < len(v) && v[j] == ']' {
				return bad("group %d is empty", groups-1)
			}
			for {
				end, r := scanBlockID(v, j, groups-1)
				if r != nil {
					return r
				}
				if total++; total > maxBlockIDs {
					return bad("has more than %d blocks", maxBlockIDs)
				}
				j = wire.SkipSpace(v, end)
				if j >= len(v) {
					return bad("is truncated")
				}
				if v[j] == ']' {
					i = j + 1
					break
				}
				if v[j] != ',' {
					return bad("group %d is not a list of integers", groups-1)
				}
				j = wire.SkipSpace(v, j+1)
			}
		} else {
			end, r := scanBlockID(v, i, -1)
			if r != nil {
				return r
			}
			if total++; total > maxBlockIDs {
				return bad("has more than %d blocks", maxBlockIDs)
			}
			i = end
		}
		i = wire.SkipSpace(v, i)
		if i >= len(v) {
			return bad("is truncated")
		}
		if v[i] == ']' {
			return nil
		}
		if v[i] != ',' {
			return bad("is not a list")
		}
		i = wire.SkipSpace(v, i+1)
	}
	return bad("is truncated")
}

// scanBlockID reads one non-negative integer at v[i], an element of group (-1: the ids are not
// grouped); anything else (a float, a string, null, a negative number, a deeper array) is a
// malformed block id. The group is formatted only into a rejection: every id of a grouped
// descriptor passes through here.
func scanBlockID(v []byte, i, group int) (int, *Rejection) {
	j := i
	for j < len(v) && v[j] >= '0' && v[j] <= '9' {
		j++
	}
	if j == i || j-i > 12 || (j < len(v) && v[j] != ',' && v[j] != ']' && v[j] != ' ' && v[j] != '\n' && v[j] != '\t' && v[j] != '\r') {
		end, err := wire.SkipValue(v, i)
		if err != nil {
			end = len(v)
		}
		where := ""
		if group >= 0 {
			where = fmt.Sprintf("[%d]", group)
		}
		return 0, Reject(ReasonMalformedBlockIDs, "remote_block_ids%s holds %s, not a non-negative integer", where, excerpt(v[i:end]))
	}
	return j, nil
}

// excerpt quotes at most 40 bytes of engine output for an error message.
func excerpt(b []byte) string {
	if len(b) > 40 {
		return string(bytes.ToValidUTF8(b[:40], nil)) + "…"
	}
	return string(bytes.ToValidUTF8(b, nil))
}
