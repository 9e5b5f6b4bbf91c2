package kvevents

import (
	"encoding/hex"
	"encoding/json"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"
)

// The byte vectors in testdata/kvevents were written by msgpack-python from vLLM's
// kv_events.py definitions (gen_vectors.py there), independently of this package and of the
// simulator's encoder, which is tested against the same files (bench/sim/kvwire).

// vectorEvent is one event of a vector's "batch:" line, in vLLM's field names.
type vectorEvent struct {
	Type      string     `json:"type"`
	Hashes    []uint64   `json:"block_hashes"`
	Parent    *uint64    `json:"parent_block_hash"`
	Tokens    []uint32   `json:"token_ids"`
	BlockSize int        `json:"block_size"`
	LoraID    *int       `json:"lora_id"`
	Medium    *string    `json:"medium"`
	LoraName  *string    `json:"lora_name"`
	ExtraKeys [][]string `json:"extra_keys"`
}

func (e vectorEvent) want() Event {
	switch e.Type {
	case TagBlockStored:
		return BlockStored{BlockHashes: e.Hashes, ParentBlockHash: e.Parent, TokenIDs: e.Tokens, BlockSize: e.BlockSize,
			LoraID: e.LoraID, Medium: e.Medium, LoraName: e.LoraName, ExtraKeys: e.ExtraKeys}
	case TagBlockRemoved:
		return BlockRemoved{BlockHashes: e.Hashes, Medium: e.Medium}
	}
	return AllBlocksCleared{}
}

func TestDecoderReadsTheVectors(t *testing.T) {
	files, _ := filepath.Glob("../../testdata/kvevents/*.vec")
	if len(files) < 5 {
		t.Fatalf("found %d vectors in testdata/kvevents, want at least 5", len(files))
	}
	for _, f := range files {
		t.Run(filepath.Base(f), func(t *testing.T) {
			raw, err := os.ReadFile(f)
			if err != nil {
				t.Fatal(err)
			}
			fields := map[string]string{}
			for _, line := range strings.Split(string(raw), "\n") {
				if k, v, ok := strings.Cut(line, ": "); ok && !strings.HasPrefix(k, "#") {
					fields[k] = v
				}
			}
			var want struct {
				TS     float64       `json:"ts"`
				Rank   int           `json:"data_parallel_rank"`
				Events []vectorEvent `json:"events"`
			}
			if err := json.Unmarshal([]byte(fields["batch"]), &want); err != nil {
				t.Fatal(err)
			}
			payload, err := hex.DecodeString(fields["msgpack"])
			if err != nil {
				t.Fatal(err)
			}
			got, err := DecodeBatch(payload)
			if err != nil {
				t.Fatalf("decode: %v", err)
			}
			if got.TS != want.TS || got.DataParallelRank == nil || *got.DataParallelRank != want.Rank {
				t.Errorf("ts %v rank %v, want %v %d", got.TS, got.DataParallelRank, want.TS, want.Rank)
			}
			if len(got.Events) != len(want.Events) {
				t.Fatalf("%d events, want %d", len(got.Events), len(want.Events))
			}
			for i, e := range want.Events {
				if w := e.want(); !reflect.DeepEqual(got.Events[i], w) {
					t.Errorf("event %d:\n got %+v\nwant %+v", i, got.Events[i], w)
				}
			}
		})
	}
}
