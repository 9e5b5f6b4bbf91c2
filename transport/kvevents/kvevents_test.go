package kvevents

import (
	"bytes"
	"encoding/hex"
	"reflect"
	"strings"
	"testing"

	"github.com/vmihailenco/msgpack/v5"
)

// vllmSample is a KVEventBatch written out by hand, byte by byte, from vLLM 0.14's
// definitions in vllm/distributed/kv_events.py, as msgspec's msgpack encoder lays them out:
//
//	class EventBatch(msgspec.Struct, array_like=True, omit_defaults=True, gc=False):
//	    ts: float
//	    events: list[Any]
//	    data_parallel_rank: int | None = None
//	class KVCacheEvent(msgspec.Struct, array_like=True, omit_defaults=True, gc=False, tag=True)
//	class BlockStored(KVCacheEvent):
//	    block_hashes: list[ExternalBlockHash]; parent_block_hash: ExternalBlockHash | None
//	    token_ids: list[int]; block_size: int; lora_id: int | None; medium: str | None
//	    lora_name: str | None
//	class BlockRemoved(KVCacheEvent): block_hashes: list[ExternalBlockHash]; medium: str | None
//	class AllBlocksCleared(KVCacheEvent): pass
//
// The batch is KVEventBatch(ts=1.5, events=[BlockStored(block_hashes=[0xffeeddccbbaa9988,
// 42], parent_block_hash=None, token_ids=[1, 2, 200, 300], block_size=2, lora_id=None,
// medium="GPU", lora_name=None), BlockRemoved(block_hashes=[42], medium="GPU"),
// AllBlocksCleared()], data_parallel_rank=0). array_like makes each struct an array of its
// fields in order; tag=True puts the class name first; a float is float64 (0xcb); msgspec
// writes a non-negative int in the smallest of positive fixint, uint8 (0xcc), uint16
// (0xcd), uint32, uint64 (0xcf); None is nil (0xc0). data_parallel_rank is written because
// it is not its default (the publisher sets its rank, 0).
var vllmSample = strings.Join([]string{
	"93",                 // KVEventBatch: array of 3
	"cb3ff8000000000000", // ts: float64 1.5
	"93",                 // events: array of 3
	"98",                 // BlockStored: array of 8 (tag + 7 fields)
	"ab" + hex.EncodeToString([]byte("BlockStored")), // fixstr of 11
	"92" + "cfffeeddccbbaa9988" + "2a",               // block_hashes: [uint64 0xffeeddccbbaa9988, fixint 42]
	"c0",                                             // parent_block_hash: None
	"94" + "01" + "02" + "ccc8" + "cd012c",           // token_ids: [1, 2, uint8 200, uint16 300]
	"02",                                             // block_size: 2
	"c0",                                             // lora_id: None
	"a3" + hex.EncodeToString([]byte("GPU")),         // medium
	"c0",                                             // lora_name: None
	"93",                                             // BlockRemoved: array of 3 (tag + 2 fields)
	"ac" + hex.EncodeToString([]byte("BlockRemoved")),
	"91" + "2a", // block_hashes: [42]
	"a3" + hex.EncodeToString([]byte("GPU")),
	"91", // AllBlocksCleared: array of 1 (the tag)
	"b0" + hex.EncodeToString([]byte("AllBlocksCleared")),
	"00", // data_parallel_rank: 0
}, "")

func sampleBatch() Batch {
	gpu, rank := MediumGPU, 0
	return Batch{TS: 1.5, DataParallelRank: &rank, Events: []Event{
		BlockStored{BlockHashes: []uint64{0xffeeddccbbaa9988, 42}, TokenIDs: []uint32{1, 2, 200, 300}, BlockSize: 2, Medium: &gpu},
		BlockRemoved{BlockHashes: []uint64{42}, Medium: &gpu},
		AllBlocksCleared{},
	}}
}

func TestDecodeVLLMSample(t *testing.T) {
	raw, err := hex.DecodeString(vllmSample)
	if err != nil {
		t.Fatal(err)
	}
	b, err := DecodeBatch(raw)
	if err != nil {
		t.Fatal(err)
	}
	if !reflect.DeepEqual(b, sampleBatch()) {
		t.Fatalf("decoded %#v\nwant    %#v", b, sampleBatch())
	}
}

// What the simulator publishes is byte for byte what vLLM would.
func TestEncodeMatchesVLLMSample(t *testing.T) {
	got, err := AppendBatch(nil, sampleBatch())
	if err != nil {
		t.Fatal(err)
	}
	if hex.EncodeToString(got) != vllmSample {
		t.Fatalf("encoded %x\nvLLM's  %s", got, vllmSample)
	}
	// Appending keeps what dst held.
	got2, _ := AppendBatch([]byte("prefix"), sampleBatch())
	if !bytes.HasPrefix(got2, []byte("prefix")) || !bytes.Equal(got2[6:], got) {
		t.Fatal("AppendBatch does not append")
	}
}

// A stored event with a parent, a batch without the rank, and a round trip.
func TestRoundTrip(t *testing.T) {
	parent := uint64(7)
	lora, name := 3, "adapter"
	in := Batch{TS: 1765000000.25, Events: []Event{BlockStored{BlockHashes: []uint64{8}, ParentBlockHash: &parent,
		TokenIDs: []uint32{4000000000, 0}, BlockSize: 2, LoraID: &lora, LoraName: &name}}}
	raw, err := AppendBatch(nil, in)
	if err != nil {
		t.Fatal(err)
	}
	if raw[0] != 0x92 {
		t.Fatalf("a batch without a rank is an array of %x, want 2 (omit_defaults)", raw[0])
	}
	out, err := DecodeBatch(raw)
	if err != nil {
		t.Fatal(err)
	}
	if !reflect.DeepEqual(in, out) {
		t.Fatalf("round trip %#v\nwant       %#v", out, in)
	}
}

// Newer vLLM (after its switch to map encoding) sends each event as a map with the tag under
// "type" and more fields; bytes hashes keep their last 8 bytes; older ones send shorter
// arrays. All of them decode.
func TestDecodeOtherVersions(t *testing.T) {
	var buf bytes.Buffer
	enc := msgpack.NewEncoder(&buf)
	digest := bytes.Repeat([]byte{0xaa}, 24)
	digest = append(digest, 0, 0, 0, 0, 0, 0, 1, 2)
	must := func(err error) {
		if err != nil {
			t.Fatal(err)
		}
	}
	must(enc.EncodeArrayLen(3))
	must(enc.EncodeFloat64(2))
	must(enc.EncodeArrayLen(3))
	// {"type":"BlockStored","block_hashes":[digest],"parent_block_hash":42,"token_ids":[5,6],
	//  "block_size":2,"lora_id":null,"medium":"GPU","lora_name":null,"extra_keys":[null],
	//  "group_idx":0,"kv_cache_spec_kind":"full_attention"}
	must(enc.EncodeMapLen(11))
	for _, kv := range []struct {
		k string
		v any
	}{{"type", "BlockStored"}, {"block_hashes", [][]byte{digest}}, {"parent_block_hash", 42}, {"token_ids", []int{5, 6}},
		{"block_size", 2}, {"lora_id", nil}, {"medium", "GPU"}, {"lora_name", nil}, {"extra_keys", []any{nil}},
		{"group_idx", 0}, {"kv_cache_spec_kind", "full_attention"}} {
		must(enc.EncodeString(kv.k))
		must(enc.Encode(kv.v))
	}
	// vLLM 0.9: BlockRemoved without medium.
	must(enc.EncodeArrayLen(2))
	must(enc.EncodeString("BlockRemoved"))
	must(enc.Encode([]uint64{9}))
	// A later version's AllBlocksCleared with a field this package does not know.
	must(enc.EncodeArrayLen(2))
	must(enc.EncodeString("AllBlocksCleared"))
	must(enc.EncodeString("future"))
	must(enc.EncodeInt(1))

	b, err := DecodeBatch(buf.Bytes())
	if err != nil {
		t.Fatal(err)
	}
	parent := uint64(42)
	gpu := MediumGPU
	rank := 1
	want := Batch{TS: 2, DataParallelRank: &rank, Events: []Event{
		BlockStored{BlockHashes: []uint64{0x0102}, ParentBlockHash: &parent, TokenIDs: []uint32{5, 6}, BlockSize: 2, Medium: &gpu,
			ExtraKeys: [][]string{nil}},
		BlockRemoved{BlockHashes: []uint64{9}},
		AllBlocksCleared{},
	}}
	if !reflect.DeepEqual(b, want) {
		t.Fatalf("decoded %#v\nwant    %#v", b, want)
	}
}

func TestDecodeRejectsWhatItCannotIndex(t *testing.T) {
	for name, raw := range map[string][]byte{
		"not an array":   {0xc0},
		"unknown event":  append([]byte{0x92, 0xcb, 0, 0, 0, 0, 0, 0, 0, 0, 0x91, 0x91, 0xa4}, "Nope"...),
		"truncated":      {0x92, 0xcb, 0x3f},
		"a null hash":    append(append([]byte{0x92, 0xcb, 0, 0, 0, 0, 0, 0, 0, 0, 0x91, 0x92, 0xac}, "BlockRemoved"...), 0x91, 0xc0),
		"events missing": {0x91, 0xcb, 0, 0, 0, 0, 0, 0, 0, 0},
	} {
		if _, err := DecodeBatch(raw); err == nil {
			t.Errorf("%s: decoded", name)
		}
	}
}

func TestFraming(t *testing.T) {
	m := Message{Topic: []byte("kv-events"), Seq: 258, Payload: []byte{0x90}}
	f := m.Frames()
	if !bytes.Equal(f[1], []byte{0, 0, 0, 0, 0, 0, 1, 2}) {
		t.Fatalf("sequence frame %x, want 8 bytes big-endian", f[1])
	}
	back, err := ParseMessage(f)
	if err != nil || back.Seq != 258 || string(back.Topic) != "kv-events" {
		t.Fatalf("%+v %v", back, err)
	}
	if _, err := ParseMessage(f[:2]); err == nil {
		t.Error("two frames parsed")
	}
	// Replay: the ROUTER sees [identity, "", start]; answers [identity, "", seq, payload]
	// and ends with −1 and an empty payload; the DEALER sees them without the identity.
	req := ReplayRequest(5)
	id, start, err := ParseReplayRequest(append([][]byte{[]byte("peer")}, req...))
	if err != nil || string(id) != "peer" || start != 5 {
		t.Fatalf("replay request %q %d %v", id, start, err)
	}
	seq, payload, end, err := ParseReplayReply(ReplayReply(id, 6, []byte{1})[1:])
	if err != nil || end || seq != 6 || !bytes.Equal(payload, []byte{1}) {
		t.Fatalf("reply %d %x %v %v", seq, payload, end, err)
	}
	if _, _, end, err := ParseReplayReply(ReplayEnd(id)[1:]); err != nil || !end {
		t.Fatalf("end marker: %v %v", end, err)
	}
	if hex.EncodeToString(EndSeq) != "ffffffffffffffff" {
		t.Fatal("the end marker is not −1")
	}
}

// extra_keys as vLLM's block pool fills them: per block None or a tuple; a key that is not a
// string (a prompt-embeds digest as bytes, an integer offset) is kept as its msgpack bytes
// behind a NUL, so it equals no key the router derives from a prompt; a count of entries that
// is not one per block is refused.
func TestDecodeExtraKeys(t *testing.T) {
	encode := func(extra []any) []byte {
		var buf bytes.Buffer
		enc := msgpack.NewEncoder(&buf)
		for _, v := range []any{[]any{1.5, []any{[]any{"BlockStored", []uint64{1, 2}, nil, []int{5, 6}, 1, nil, "GPU", "lora", extra}}}} {
			if err := enc.Encode(v); err != nil {
				t.Fatal(err)
			}
		}
		return buf.Bytes()
	}
	b, err := DecodeBatch(encode([]any{[]any{"lora", "salt"}, []any{"lora", []byte{0xab}, 7}}))
	if err != nil {
		t.Fatal(err)
	}
	want := [][]string{{"lora", "salt"}, {"lora", "\x00\xc4\x01\xab", "\x00\x07"}}
	if got := b.Events[0].(BlockStored).ExtraKeys; !reflect.DeepEqual(got, want) {
		t.Fatalf("extra keys %q, want %q", got, want)
	}
	if _, err := DecodeBatch(encode([]any{nil})); err == nil {
		t.Fatal("extra_keys for one block of two was accepted")
	}
}
