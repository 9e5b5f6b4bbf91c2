// Package kvevents owns vLLM's KV cache event stream on the wire: the message types (a
// KVEventBatch of BlockStored, BlockRemoved and AllBlocksCleared events), their msgpack
// encoding and decoding, the ZeroMQ message framing (topic, sequence number, payload) and the
// replay protocol that fills a gap, and a subscriber that follows one engine's stream. An
// engine started with vLLM's --kv-events-config publishes it; the simulator (bench/sim)
// publishes the same bytes from its prefix cache.
//
// The layout is vLLM's msgspec structs as vLLM 0.14 (the version the simulator stands for)
// writes them: every struct is array_like with omit_defaults, so a struct is a msgpack array
// of its fields in declaration order, trailing fields equal to their default left out, and an
// event (a tagged union, tag=True) is an array whose first element is its class name:
//
//	KVEventBatch     [ts float64, [event, …], data_parallel_rank int]   (rank left out when None)
//	BlockStored      ["BlockStored", block_hashes [int, …], parent_block_hash int|nil,
//	                  token_ids [int, …], block_size int, lora_id int|nil, medium str|nil,
//	                  lora_name str|nil, extra_keys [[key, …]|nil, …]|nil]
//	BlockRemoved     ["BlockRemoved", block_hashes [int, …], medium str|nil]
//	AllBlocksCleared ["AllBlocksCleared"]
//
// A block hash is an integer (vLLM's default, VLLM_KV_EVENTS_USE_INT_BLOCK_HASHES: the last
// 8 bytes of the block's digest, big-endian). The decoder also reads what other versions
// send: shorter or longer event arrays (fields added since, or not yet, are left zero or
// skipped), events as maps keyed by field name with the tag under "type" (vLLM after its
// switch to map encoding), and hashes as bytes (the digest itself; the last 8 bytes are
// kept, as vLLM's own conversion does).
package kvevents

import (
	"bytes"
	"errors"
	"fmt"

	"github.com/vmihailenco/msgpack/v5"
)

// MediumGPU is vLLM's medium for blocks in GPU memory, the only one the simulator has.
const MediumGPU = "GPU"

// Batch is one KVEventBatch: the events of one engine step.
type Batch struct {
	// TS is the wall-clock time the batch was made, in seconds since the Unix epoch.
	TS     float64
	Events []Event
	// DataParallelRank is the publishing engine's data-parallel rank; nil leaves it out.
	DataParallelRank *int
}

// Event is a BlockStored, BlockRemoved or AllBlocksCleared.
type Event interface{ kvEvent() }

// BlockStored says blocks entered the prefix cache: consecutive blocks of one prompt, the
// first following ParentBlockHash (nil: the prompt's first block).
type BlockStored struct {
	BlockHashes     []uint64
	ParentBlockHash *uint64
	// TokenIDs are the stored blocks' tokens, BlockSize per block.
	TokenIDs  []uint32
	BlockSize int
	LoraID    *int
	Medium    *string
	LoraName  *string
	// ExtraKeys are, per stored block, the extra keys vLLM hashed into it (the LoRA adapter's
	// name, the cache_salt on a prompt's first block, multimodal identifiers): nil for a block
	// with none; a nil slice when the engine sent none at all (left out by versions before
	// the field). A key that is not a string is kept as "\x00" followed by its msgpack bytes,
	// so it equals no key the router derives from a prompt.
	ExtraKeys [][]string
}

// BlockRemoved says blocks left the cache (evicted).
type BlockRemoved struct {
	BlockHashes []uint64
	Medium      *string
}

// AllBlocksCleared says the whole prefix cache was emptied (a reset).
type AllBlocksCleared struct{}

func (BlockStored) kvEvent()      {}
func (BlockRemoved) kvEvent()     {}
func (AllBlocksCleared) kvEvent() {}

// Tags: the class names msgspec writes as a tagged event's first element (or "type").
const (
	TagBlockStored      = "BlockStored"
	TagBlockRemoved     = "BlockRemoved"
	TagAllBlocksCleared = "AllBlocksCleared"
)

// AppendBatch appends b's msgpack encoding, in vLLM 0.14's layout (the package doc), to dst.
func AppendBatch(dst []byte, b Batch) ([]byte, error) {
	buf := bytes.NewBuffer(dst)
	enc := msgpack.NewEncoder(buf)
	n := 2
	if b.DataParallelRank != nil {
		n = 3
	}
	err := errors.Join(enc.EncodeArrayLen(n), enc.EncodeFloat64(b.TS), enc.EncodeArrayLen(len(b.Events)))
	for _, ev := range b.Events {
		err = errors.Join(err, encodeEvent(enc, ev))
	}
	if b.DataParallelRank != nil {
		err = errors.Join(err, enc.EncodeInt(int64(*b.DataParallelRank)))
	}
	if err != nil {
		return dst, fmt.Errorf("kvevents: encode: %w", err)
	}
	return buf.Bytes(), nil
}

func encodeEvent(enc *msgpack.Encoder, ev Event) error {
	switch e := ev.(type) {
	case BlockStored:
		n := 8
		if e.ExtraKeys != nil {
			n = 9
		}
		err := errors.Join(enc.EncodeArrayLen(n), enc.EncodeString(TagBlockStored), encodeHashes(enc, e.BlockHashes),
			encodeOptUint(enc, e.ParentBlockHash), encodeTokens(enc, e.TokenIDs), enc.EncodeInt(int64(e.BlockSize)),
			encodeOptInt(enc, e.LoraID), encodeOptString(enc, e.Medium), encodeOptString(enc, e.LoraName))
		if e.ExtraKeys != nil {
			err = errors.Join(err, encodeExtraKeys(enc, e.ExtraKeys))
		}
		return err
	case BlockRemoved:
		return errors.Join(enc.EncodeArrayLen(3), enc.EncodeString(TagBlockRemoved), encodeHashes(enc, e.BlockHashes),
			encodeOptString(enc, e.Medium))
	case AllBlocksCleared:
		return errors.Join(enc.EncodeArrayLen(1), enc.EncodeString(TagAllBlocksCleared))
	}
	return fmt.Errorf("unknown event %T", ev)
}

func encodeHashes(enc *msgpack.Encoder, hs []uint64) error {
	err := enc.EncodeArrayLen(len(hs))
	for _, h := range hs {
		err = errors.Join(err, enc.EncodeUint(h))
	}
	return err
}

func encodeTokens(enc *msgpack.Encoder, ts []uint32) error {
	err := enc.EncodeArrayLen(len(ts))
	for _, t := range ts {
		err = errors.Join(err, enc.EncodeUint(uint64(t)))
	}
	return err
}

func encodeExtraKeys(enc *msgpack.Encoder, keys [][]string) error {
	err := enc.EncodeArrayLen(len(keys))
	for _, block := range keys {
		if block == nil {
			err = errors.Join(err, enc.EncodeNil())
			continue
		}
		err = errors.Join(err, enc.EncodeArrayLen(len(block)))
		for _, k := range block {
			err = errors.Join(err, enc.EncodeString(k))
		}
	}
	return err
}

func encodeOptUint(enc *msgpack.Encoder, v *uint64) error {
	if v == nil {
		return enc.EncodeNil()
	}
	return enc.EncodeUint(*v)
}

func encodeOptInt(enc *msgpack.Encoder, v *int) error {
	if v == nil {
		return enc.EncodeNil()
	}
	return enc.EncodeInt(int64(*v))
}

func encodeOptString(enc *msgpack.Encoder, v *string) error {
	if v == nil {
		return enc.EncodeNil()
	}
	return enc.EncodeString(*v)
}
