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
//	                  lora_name str|nil]
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
	"encoding/binary"
	"errors"
	"fmt"

	"github.com/vmihailenco/msgpack/v5"
	"github.com/vmihailenco/msgpack/v5/msgpcode"
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
		return errors.Join(enc.EncodeArrayLen(8), enc.EncodeString(TagBlockStored), encodeHashes(enc, e.BlockHashes),
			encodeOptUint(enc, e.ParentBlockHash), encodeTokens(enc, e.TokenIDs), enc.EncodeInt(int64(e.BlockSize)),
			encodeOptInt(enc, e.LoraID), encodeOptString(enc, e.Medium), encodeOptString(enc, e.LoraName))
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

// DecodeBatch decodes one KVEventBatch payload, in any of the layouts the package doc
// lists. An event of an unknown tag is an error: the caller cannot keep an exact index
// past it.
func DecodeBatch(payload []byte) (Batch, error) {
	d := decoder{msgpack.NewDecoder(bytes.NewReader(payload))}
	b, err := d.batch()
	if err != nil {
		return Batch{}, fmt.Errorf("kvevents: decode batch: %w", err)
	}
	return b, nil
}

type decoder struct{ *msgpack.Decoder }

func (d decoder) batch() (Batch, error) {
	var b Batch
	n, err := d.DecodeArrayLen()
	if err != nil || n < 2 {
		return b, fmt.Errorf("want an array of at least 2 (ts, events): %d, %v", n, err)
	}
	if b.TS, err = d.DecodeFloat64(); err != nil {
		return b, fmt.Errorf("ts: %w", err)
	}
	m, err := d.DecodeArrayLen()
	if err != nil {
		return b, fmt.Errorf("events: %w", err)
	}
	for i := range max(m, 0) {
		ev, err := d.event()
		if err != nil {
			return b, fmt.Errorf("event %d: %w", i, err)
		}
		b.Events = append(b.Events, ev)
	}
	if n >= 3 {
		if b.DataParallelRank, err = d.optInt(); err != nil {
			return b, fmt.Errorf("data_parallel_rank: %w", err)
		}
	}
	for range n - 3 { // fields a later version added
		if err := d.Skip(); err != nil {
			return b, err
		}
	}
	return b, nil
}

func (d decoder) event() (Event, error) {
	c, err := d.PeekCode()
	if err != nil {
		return nil, err
	}
	if msgpcode.IsFixedMap(c) || c == msgpcode.Map16 || c == msgpcode.Map32 {
		return d.mapEvent()
	}
	n, err := d.DecodeArrayLen()
	if err != nil || n < 1 {
		return nil, fmt.Errorf("want a tagged array: %d, %v", n, err)
	}
	tag, err := d.DecodeString()
	if err != nil {
		return nil, fmt.Errorf("tag: %w", err)
	}
	fields, ok := layouts[tag]
	if !ok {
		return nil, fmt.Errorf("unknown event %q", tag)
	}
	var s eventFields
	for i := 1; i < n; i++ {
		if i-1 >= len(fields) {
			if err := d.Skip(); err != nil {
				return nil, err
			}
			continue
		}
		if err := d.field(&s, fields[i-1]); err != nil {
			return nil, fmt.Errorf("%s.%s: %w", tag, fields[i-1], err)
		}
	}
	return s.event(tag), nil
}

func (d decoder) mapEvent() (Event, error) {
	n, err := d.DecodeMapLen()
	if err != nil {
		return nil, err
	}
	var s eventFields
	tag := ""
	for range n {
		key, err := d.DecodeString()
		if err != nil {
			return nil, fmt.Errorf("key: %w", err)
		}
		if key == "type" {
			if tag, err = d.DecodeString(); err != nil {
				return nil, fmt.Errorf("type: %w", err)
			}
			continue
		}
		if err := d.field(&s, key); err != nil {
			return nil, fmt.Errorf("%s: %w", key, err)
		}
	}
	if _, ok := layouts[tag]; !ok {
		return nil, fmt.Errorf("unknown event %q", tag)
	}
	return s.event(tag), nil
}

// layouts are each event's fields in vLLM 0.14's order (after the tag).
var layouts = map[string][]string{
	TagBlockStored:      {"block_hashes", "parent_block_hash", "token_ids", "block_size", "lora_id", "medium", "lora_name"},
	TagBlockRemoved:     {"block_hashes", "medium"},
	TagAllBlocksCleared: {},
}

// eventFields gathers any event's fields.
type eventFields struct {
	hashes   []uint64
	parent   *uint64
	tokens   []uint32
	size     int
	loraID   *int
	medium   *string
	loraName *string
}

func (s *eventFields) event(tag string) Event {
	switch tag {
	case TagBlockStored:
		return BlockStored{BlockHashes: s.hashes, ParentBlockHash: s.parent, TokenIDs: s.tokens, BlockSize: s.size,
			LoraID: s.loraID, Medium: s.medium, LoraName: s.loraName}
	case TagBlockRemoved:
		return BlockRemoved{BlockHashes: s.hashes, Medium: s.medium}
	}
	return AllBlocksCleared{}
}

// field decodes the named field into s; a field this package does not know is skipped.
func (d decoder) field(s *eventFields, name string) error {
	var err error
	switch name {
	case "block_hashes":
		s.hashes, err = d.hashes()
	case "parent_block_hash":
		if null, e := d.null(); e != nil || null {
			return e
		}
		var h uint64
		h, err = d.hash()
		s.parent = &h
	case "token_ids":
		s.tokens, err = d.tokens()
	case "block_size":
		var v int64
		v, err = d.DecodeInt64()
		s.size = int(v)
	case "lora_id":
		s.loraID, err = d.optInt()
	case "medium":
		s.medium, err = d.optString()
	case "lora_name":
		s.loraName, err = d.optString()
	default:
		err = d.Skip()
	}
	return err
}

// null consumes a nil and reports true, or reports false and consumes nothing.
func (d decoder) null() (bool, error) {
	c, err := d.PeekCode()
	if err != nil || c != msgpcode.Nil {
		return false, err
	}
	return true, d.DecodeNil()
}

func (d decoder) hashes() ([]uint64, error) {
	n, err := d.DecodeArrayLen()
	if err != nil {
		return nil, err
	}
	out := make([]uint64, 0, max(n, 0))
	for range max(n, 0) {
		h, err := d.hash()
		if err != nil {
			return nil, err
		}
		out = append(out, h)
	}
	return out, nil
}

// hash reads an integer hash, or a bytes one (its last 8 bytes, big-endian).
func (d decoder) hash() (uint64, error) {
	c, err := d.PeekCode()
	if err != nil {
		return 0, err
	}
	if msgpcode.IsBin(c) || msgpcode.IsString(c) {
		b, err := d.DecodeBytes()
		if err != nil {
			return 0, err
		}
		var tail [8]byte
		copy(tail[8-min(len(b), 8):], b[max(len(b)-8, 0):])
		return binary.BigEndian.Uint64(tail[:]), nil
	}
	if c == msgpcode.Nil {
		return 0, errors.New("a null hash")
	}
	return d.DecodeUint64() // a negative int64 hash keeps its 64 bits
}

func (d decoder) tokens() ([]uint32, error) {
	n, err := d.DecodeArrayLen()
	if err != nil {
		return nil, err
	}
	out := make([]uint32, 0, max(n, 0))
	for range max(n, 0) {
		v, err := d.DecodeUint64()
		if err != nil {
			return nil, err
		}
		out = append(out, uint32(v))
	}
	return out, nil
}

func (d decoder) optInt() (*int, error) {
	if null, err := d.null(); err != nil || null {
		return nil, err
	}
	v, err := d.DecodeInt64()
	if err != nil {
		return nil, err
	}
	i := int(v)
	return &i, nil
}

func (d decoder) optString() (*string, error) {
	if null, err := d.null(); err != nil || null {
		return nil, err
	}
	s, err := d.DecodeString()
	if err != nil {
		return nil, err
	}
	return &s, nil
}
