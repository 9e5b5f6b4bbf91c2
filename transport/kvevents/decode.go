package kvevents

import (
	"encoding/binary"
	"fmt"
)

// The bounds on what a publisher may send. A KV event stream comes from whoever answers at an
// engine's kv_events endpoint, which a discovery record or an operator's typo can point anywhere,
// so every count and size a message claims is checked against these and against the bytes that
// actually arrived before anything is allocated for it. What a payload of n bytes can cost once
// decoded is then bounded by a small multiple of n (a one-byte hash becomes eight), never by a
// number in a header.
//
// The maxima are far above what vLLM sends. One batch holds one engine step's events: a
// BlockStored per request whose new blocks filled in the step (its hashes and their tokens) and
// a BlockRemoved per evicted block. A step's new tokens are bounded by the engine's
// max_num_batched_tokens (thousands to tens of thousands), and token IDs take at most 5 bytes
// each, so a step of 200,000 new tokens is about 1 MiB.
const (
	// MaxMessageBytes bounds a ZeroMQ message (all its frames) and so a batch's payload.
	MaxMessageBytes = 4 << 20
	// MaxEventsPerBatch bounds the events of one batch.
	MaxEventsPerBatch = 1 << 16
	// MaxHashesPerEvent bounds the block hashes of one event: a 1M-token prompt in blocks of 16.
	MaxHashesPerEvent = 1 << 16
	// MaxBlockSize bounds a block's tokens (vLLM's block_size; hybrid models use a few hundred
	// to a few thousand): a BlockStored carries at most this many token IDs per hash.
	MaxBlockSize = 1 << 14
	// MaxTokensPerEvent bounds the token IDs of one BlockStored.
	MaxTokensPerEvent = 1 << 20
	// MaxElementsPerBatch bounds the hashes and token IDs of a whole batch together, what the
	// decoded batch holds (8 bytes a hash, 4 a token).
	MaxElementsPerBatch = 1 << 21
	// maxStringBytes bounds a tag, a field name, a medium or a LoRA name.
	maxStringBytes = 1 << 10
	// maxFields bounds an event's or a batch's fields (vLLM's have up to a dozen).
	maxFields = 64
)

// DecodeBatch decodes one KVEventBatch payload, in any of the layouts the package doc lists,
// within the bounds above. An event of an unknown tag is an error: the caller cannot keep an
// exact index past it.
func DecodeBatch(payload []byte) (Batch, error) {
	if len(payload) > MaxMessageBytes {
		return Batch{}, fmt.Errorf("kvevents: decode batch: a payload of %d bytes, at most %d are accepted", len(payload), MaxMessageBytes)
	}
	d := decoder{r: reader{b: payload}, budget: MaxElementsPerBatch}
	b, err := d.batch()
	if err != nil {
		return Batch{}, fmt.Errorf("kvevents: decode batch: %w", err)
	}
	return b, nil
}

// decoder reads a batch; budget is what is left of MaxElementsPerBatch.
type decoder struct {
	r      reader
	budget int
}

func (d *decoder) batch() (Batch, error) {
	var b Batch
	n, err := d.r.arrayLen(maxFields)
	if err != nil || n < 2 {
		return b, fmt.Errorf("want an array of at least 2 (ts, events): %d, %v", n, err)
	}
	if b.TS, err = d.r.float(); err != nil {
		return b, fmt.Errorf("ts: %w", err)
	}
	m, err := d.r.arrayLen(MaxEventsPerBatch)
	if err != nil {
		return b, fmt.Errorf("events: %w", err)
	}
	b.Events = make([]Event, 0, min(m, 64)) // grown as events arrive, not as claimed
	for i := range m {
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
		if err := d.r.skip(); err != nil {
			return b, err
		}
	}
	return b, nil
}

func (d *decoder) event() (Event, error) {
	if d.r.isMap() {
		return d.mapEvent()
	}
	n, err := d.r.arrayLen(maxFields)
	if err != nil || n < 1 {
		return nil, fmt.Errorf("want a tagged array: %d, %v", n, err)
	}
	raw, err := d.r.raw(maxStringBytes)
	if err != nil {
		return nil, fmt.Errorf("tag: %w", err)
	}
	tag, fields, ok := tagOf(raw)
	if !ok {
		return nil, fmt.Errorf("unknown event %q", raw)
	}
	var s eventFields
	for i := 1; i < n; i++ {
		if i-1 >= len(fields) {
			if err := d.r.skip(); err != nil {
				return nil, err
			}
			continue
		}
		if err := d.field(&s, fields[i-1]); err != nil {
			return nil, fmt.Errorf("%s.%s: %w", tag, fields[i-1], err)
		}
	}
	return s.event(tag)
}

func (d *decoder) mapEvent() (Event, error) {
	n, err := d.r.mapLen(maxFields)
	if err != nil {
		return nil, err
	}
	var s eventFields
	tag := ""
	for range n {
		key, err := d.r.raw(maxStringBytes)
		if err != nil {
			return nil, fmt.Errorf("key: %w", err)
		}
		if string(key) == "type" {
			raw, err := d.r.raw(maxStringBytes)
			if err != nil {
				return nil, fmt.Errorf("type: %w", err)
			}
			var ok bool
			if tag, _, ok = tagOf(raw); !ok {
				return nil, fmt.Errorf("unknown event %q", raw)
			}
			continue
		}
		if err := d.field(&s, string(key)); err != nil {
			return nil, fmt.Errorf("%s: %w", key, err)
		}
	}
	if tag == "" {
		return nil, fmt.Errorf("an event without a type")
	}
	return s.event(tag)
}

// layouts are each event's fields in vLLM 0.14's order (after the tag).
var layouts = map[string][]string{
	TagBlockStored:      {"block_hashes", "parent_block_hash", "token_ids", "block_size", "lora_id", "medium", "lora_name", "extra_keys"},
	TagBlockRemoved:     {"block_hashes", "medium"},
	TagAllBlocksCleared: {},
}

// tagOf returns the known tag raw spells and its layout.
func tagOf(raw []byte) (string, []string, bool) {
	for tag, fields := range layouts {
		if string(raw) == tag {
			return tag, fields, true
		}
	}
	return "", nil, false
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
	extra    [][]string
}

func (s *eventFields) event(tag string) (Event, error) {
	switch tag {
	case TagBlockStored:
		if s.size < 0 || s.size > MaxBlockSize {
			return nil, fmt.Errorf("block_size %d, want 0 to %d", s.size, MaxBlockSize)
		}
		if len(s.tokens) > len(s.hashes)*MaxBlockSize {
			return nil, fmt.Errorf("%d token IDs for %d blocks", len(s.tokens), len(s.hashes))
		}
		if s.extra != nil && len(s.extra) != len(s.hashes) {
			return nil, fmt.Errorf("extra_keys for %d blocks, block_hashes for %d", len(s.extra), len(s.hashes))
		}
		return BlockStored{BlockHashes: s.hashes, ParentBlockHash: s.parent, TokenIDs: s.tokens, BlockSize: s.size,
			LoraID: s.loraID, Medium: s.medium, LoraName: s.loraName, ExtraKeys: s.extra}, nil
	case TagBlockRemoved:
		return BlockRemoved{BlockHashes: s.hashes, Medium: s.medium}, nil
	}
	return AllBlocksCleared{}, nil
}

// field decodes the named field into s; a field this package does not know is skipped.
func (d *decoder) field(s *eventFields, name string) error {
	var err error
	switch name {
	case "block_hashes":
		s.hashes, err = d.hashes()
	case "parent_block_hash":
		if d.r.isNil() {
			return d.r.skip()
		}
		var h uint64
		h, err = d.hash()
		s.parent = &h
	case "token_ids":
		s.tokens, err = d.tokens()
	case "block_size":
		var v int64
		v, err = d.r.int()
		s.size = int(max(min(v, MaxBlockSize+1), -1))
	case "lora_id":
		s.loraID, err = d.optInt()
	case "medium":
		s.medium, err = d.optString()
	case "lora_name":
		s.loraName, err = d.optString()
	case "extra_keys":
		s.extra, err = d.extraKeys()
	default:
		err = d.r.skip()
	}
	return err
}

// elements reads an array header of at most limit elements and takes them from the batch's
// budget.
func (d *decoder) elements(limit int) (int, error) {
	n, err := d.r.arrayLen(limit)
	if err != nil {
		return 0, err
	}
	if n > d.budget {
		return 0, fmt.Errorf("%d more hashes and token IDs than a batch may hold (%d)", n-d.budget, MaxElementsPerBatch)
	}
	d.budget -= n
	return n, nil
}

func (d *decoder) hashes() ([]uint64, error) {
	n, err := d.elements(MaxHashesPerEvent)
	if err != nil {
		return nil, err
	}
	out := make([]uint64, 0, n)
	for range n {
		h, err := d.hash()
		if err != nil {
			return nil, err
		}
		out = append(out, h)
	}
	return out, nil
}

// hash reads an integer hash, or a bytes one (its last 8 bytes, big-endian).
func (d *decoder) hash() (uint64, error) {
	if d.r.isRaw() {
		b, err := d.r.raw(maxStringBytes)
		if err != nil {
			return 0, err
		}
		var tail [8]byte
		copy(tail[8-min(len(b), 8):], b[max(len(b)-8, 0):])
		return binary.BigEndian.Uint64(tail[:]), nil
	}
	if d.r.isNil() {
		return 0, fmt.Errorf("a null hash")
	}
	return d.r.uint()
}

func (d *decoder) tokens() ([]uint32, error) {
	n, err := d.elements(MaxTokensPerEvent)
	if err != nil {
		return nil, err
	}
	out := make([]uint32, 0, n)
	for range n {
		v, err := d.r.uint()
		if err != nil {
			return nil, err
		}
		out = append(out, uint32(v))
	}
	return out, nil
}

func (d *decoder) optInt() (*int, error) {
	if d.r.isNil() {
		return nil, d.r.skip()
	}
	v, err := d.r.int()
	if err != nil {
		return nil, err
	}
	i := int(v)
	return &i, nil
}

func (d *decoder) optString() (*string, error) {
	if d.r.isNil() {
		return nil, d.r.skip()
	}
	b, err := d.r.raw(maxStringBytes)
	if err != nil {
		return nil, err
	}
	s := string(b)
	return &s, nil
}

// extraKeys reads extra_keys: None, or per block None or a list of keys. A string key is kept
// as it is; any other (bytes, an integer, a tuple) as "\x00" and its msgpack bytes.
func (d *decoder) extraKeys() ([][]string, error) {
	if d.r.isNil() {
		return nil, d.r.skip()
	}
	n, err := d.elements(MaxHashesPerEvent)
	if err != nil {
		return nil, err
	}
	out := make([][]string, 0, n)
	for range n {
		if d.r.isNil() {
			if err := d.r.skip(); err != nil {
				return nil, err
			}
			out = append(out, nil)
			continue
		}
		m, err := d.elements(maxFields)
		if err != nil {
			return nil, err
		}
		keys := make([]string, 0, m)
		for range m {
			k, err := d.extraKey()
			if err != nil {
				return nil, err
			}
			keys = append(keys, k)
		}
		out = append(out, keys)
	}
	return out, nil
}

func (d *decoder) extraKey() (string, error) {
	if d.r.isStr() {
		b, err := d.r.raw(maxStringBytes)
		return string(b), err
	}
	start := d.r.i
	if err := d.r.skip(); err != nil {
		return "", err
	}
	if d.r.i-start > maxStringBytes {
		return "", fmt.Errorf("an extra key of %d bytes, at most %d are accepted", d.r.i-start, maxStringBytes)
	}
	return "\x00" + string(d.r.b[start:d.r.i]), nil
}
