// Package kvwire writes vLLM's KV cache events as an engine does, from vLLM's own
// definitions and not from the router's decoder (transport/kvevents), so that a misreading of
// the format on either side shows up in the byte vectors both are tested against
// (testdata/kvevents/*.vec at the repository root).
//
// The layout is vllm/distributed/kv_events.py at vLLM v0.17.0: KVEventBatch and the events
// are msgspec Structs with array_like=True and omit_defaults=True, encoded by
// msgspec.msgpack.Encoder. array_like makes a struct a msgpack array of its fields in
// declaration order; omit_defaults drops trailing fields equal to their default; the events
// are a tagged union (tag=True), so each array starts with the class name:
//
//	KVEventBatch     [ts: float64, events: [...], data_parallel_rank: int]
//	BlockStored      ["BlockStored", block_hashes, parent_block_hash|nil, token_ids,
//	                  block_size, lora_id|nil, medium|nil, lora_name|nil, extra_keys]
//	BlockRemoved     ["BlockRemoved", block_hashes, medium|nil]
//	AllBlocksCleared ["AllBlocksCleared"]
//
// data_parallel_rank defaults to None but the ZMQ publisher fills in its rank (0) before
// encoding, so it is always there. extra_keys (default None) is, as vLLM's block pool fills
// it in cache_full_blocks, one entry per stored block — None or the tuple of that block's
// extra hash keys (LoRA name, cache_salt on the first block) — so a BlockStored always has
// nine elements. Hashes are vLLM's ExternalBlockHash with VLLM_KV_EVENTS_USE_INT_BLOCK_HASHES
// (the default): unsigned integers. Integers and strings take msgpack's shortest form, as
// msgspec writes them.
package kvwire

import (
	"encoding/binary"
	"math"
)

// MediumGPU is vLLM's MEDIUM_GPU.
const MediumGPU = "GPU"

// Batch is one KVEventBatch.
type Batch struct {
	TS               float64
	Events           []Event
	DataParallelRank int
}

// Event is a BlockStored, BlockRemoved or AllBlocksCleared.
type Event interface {
	appendTo(b []byte) []byte
}

// BlockStored says consecutive blocks of one request entered the prefix cache.
type BlockStored struct {
	BlockHashes     []uint64
	ParentBlockHash *uint64 // nil: the request's first block
	TokenIDs        []uint32
	BlockSize       int
	LoraID          *int
	Medium          *string
	LoraName        *string
	// ExtraKeys has one entry per block: nil (None) or that block's extra keys, each a
	// string. A nil slice is written as None.
	ExtraKeys [][]string
}

// BlockRemoved says blocks left the cache.
type BlockRemoved struct {
	BlockHashes []uint64
	Medium      *string
}

// AllBlocksCleared says the prefix cache was reset.
type AllBlocksCleared struct{}

// Append appends b's encoding to dst.
func Append(dst []byte, b Batch) []byte {
	dst = appendArray(dst, 3)
	dst = binary.BigEndian.AppendUint64(append(dst, 0xcb), math.Float64bits(b.TS))
	dst = appendArray(dst, len(b.Events))
	for _, e := range b.Events {
		dst = e.appendTo(dst)
	}
	return appendInt(dst, int64(b.DataParallelRank))
}

func (e BlockStored) appendTo(b []byte) []byte {
	b = appendString(appendArray(b, 9), "BlockStored")
	b = appendHashes(b, e.BlockHashes)
	if e.ParentBlockHash == nil {
		b = append(b, 0xc0)
	} else {
		b = appendUint(b, *e.ParentBlockHash)
	}
	b = appendArray(b, len(e.TokenIDs))
	for _, t := range e.TokenIDs {
		b = appendUint(b, uint64(t))
	}
	b = appendInt(b, int64(e.BlockSize))
	if e.LoraID == nil {
		b = append(b, 0xc0)
	} else {
		b = appendInt(b, int64(*e.LoraID))
	}
	b = appendOptString(b, e.Medium)
	b = appendOptString(b, e.LoraName)
	if e.ExtraKeys == nil {
		return append(b, 0xc0)
	}
	b = appendArray(b, len(e.ExtraKeys))
	for _, keys := range e.ExtraKeys {
		if keys == nil {
			b = append(b, 0xc0)
			continue
		}
		b = appendArray(b, len(keys))
		for _, k := range keys {
			b = appendString(b, k)
		}
	}
	return b
}

func (e BlockRemoved) appendTo(b []byte) []byte {
	b = appendString(appendArray(b, 3), "BlockRemoved")
	return appendOptString(appendHashes(b, e.BlockHashes), e.Medium)
}

func (AllBlocksCleared) appendTo(b []byte) []byte {
	return appendString(appendArray(b, 1), "AllBlocksCleared")
}

func appendHashes(b []byte, hs []uint64) []byte {
	b = appendArray(b, len(hs))
	for _, h := range hs {
		b = appendUint(b, h)
	}
	return b
}

func appendArray(b []byte, n int) []byte {
	switch {
	case n < 16:
		return append(b, 0x90|byte(n))
	case n <= math.MaxUint16:
		return binary.BigEndian.AppendUint16(append(b, 0xdc), uint16(n))
	}
	return binary.BigEndian.AppendUint32(append(b, 0xdd), uint32(n))
}

func appendString(b []byte, s string) []byte {
	switch n := len(s); {
	case n < 32:
		b = append(b, 0xa0|byte(n))
	case n <= math.MaxUint8:
		b = append(b, 0xd9, byte(n))
	case n <= math.MaxUint16:
		b = binary.BigEndian.AppendUint16(append(b, 0xda), uint16(n))
	default:
		b = binary.BigEndian.AppendUint32(append(b, 0xdb), uint32(n))
	}
	return append(b, s...)
}

func appendOptString(b []byte, s *string) []byte {
	if s == nil {
		return append(b, 0xc0)
	}
	return appendString(b, *s)
}

func appendUint(b []byte, v uint64) []byte {
	switch {
	case v < 128:
		return append(b, byte(v))
	case v <= math.MaxUint8:
		return append(b, 0xcc, byte(v))
	case v <= math.MaxUint16:
		return binary.BigEndian.AppendUint16(append(b, 0xcd), uint16(v))
	case v <= math.MaxUint32:
		return binary.BigEndian.AppendUint32(append(b, 0xce), uint32(v))
	}
	return binary.BigEndian.AppendUint64(append(b, 0xcf), v)
}

func appendInt(b []byte, v int64) []byte {
	switch {
	case v >= 0:
		return appendUint(b, uint64(v))
	case v >= -32:
		return append(b, byte(v))
	case v >= math.MinInt8:
		return append(b, 0xd0, byte(v))
	case v >= math.MinInt16:
		return binary.BigEndian.AppendUint16(append(b, 0xd1), uint16(v))
	case v >= math.MinInt32:
		return binary.BigEndian.AppendUint32(append(b, 0xd2), uint32(v))
	}
	return binary.BigEndian.AppendUint64(append(b, 0xd3), uint64(v))
}
