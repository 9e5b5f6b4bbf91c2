package kvwire

import (
	"bufio"
	"encoding/hex"
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// vecBatch is a vector's "batch:" line: vLLM's field names, hashes as exact integers.
type vecBatch struct {
	TS     float64 `json:"ts"`
	Rank   int     `json:"data_parallel_rank"`
	Events []struct {
		Type      string     `json:"type"`
		Hashes    []uint64   `json:"block_hashes"`
		Parent    *uint64    `json:"parent_block_hash"`
		Tokens    []uint32   `json:"token_ids"`
		BlockSize int        `json:"block_size"`
		LoraID    *int       `json:"lora_id"`
		Medium    *string    `json:"medium"`
		LoraName  *string    `json:"lora_name"`
		ExtraKeys [][]string `json:"extra_keys"`
	} `json:"events"`
}

func (v vecBatch) batch() Batch {
	b := Batch{TS: v.TS, DataParallelRank: v.Rank}
	for _, e := range v.Events {
		switch e.Type {
		case "BlockStored":
			b.Events = append(b.Events, BlockStored{BlockHashes: e.Hashes, ParentBlockHash: e.Parent, TokenIDs: e.Tokens,
				BlockSize: e.BlockSize, LoraID: e.LoraID, Medium: e.Medium, LoraName: e.LoraName, ExtraKeys: e.ExtraKeys})
		case "BlockRemoved":
			b.Events = append(b.Events, BlockRemoved{BlockHashes: e.Hashes, Medium: e.Medium})
		case "AllBlocksCleared":
			b.Events = append(b.Events, AllBlocksCleared{})
		}
	}
	return b
}

// TestEncoderMatchesTheVectors encodes every array-layout vector's batch and compares the
// bytes with the vector's, which msgpack-python wrote from vLLM's definitions.
func TestEncoderMatchesTheVectors(t *testing.T) {
	files, _ := filepath.Glob("../../../testdata/kvevents/*.vec")
	if len(files) == 0 {
		t.Fatal("no vectors in testdata/kvevents")
	}
	n := 0
	for _, f := range files {
		fields := readVector(t, f)
		if fields["layout"] != "array" {
			continue // a layout the simulator does not write
		}
		var vb vecBatch
		if err := json.Unmarshal([]byte(fields["batch"]), &vb); err != nil {
			t.Fatalf("%s: %v", f, err)
		}
		got := hex.EncodeToString(Append(nil, vb.batch()))
		if got != fields["msgpack"] {
			t.Errorf("%s:\n got %s\nwant %s", filepath.Base(f), got, fields["msgpack"])
		}
		n++
	}
	if n < 4 {
		t.Fatalf("checked %d array-layout vectors, want at least 4", n)
	}
}

func readVector(t *testing.T, path string) map[string]string {
	t.Helper()
	f, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	out := map[string]string{}
	s := bufio.NewScanner(f)
	s.Buffer(nil, 1<<20)
	for s.Scan() {
		if k, v, ok := strings.Cut(s.Text(), ": "); ok && !strings.HasPrefix(k, "#") {
			out[k] = v
		}
	}
	return out
}

func TestFrames(t *testing.T) {
	fr := Frames([]byte("kv"), 258, []byte{0x90})
	if string(fr[0]) != "kv" || hex.EncodeToString(fr[1]) != "0000000000000102" || len(fr[2]) != 1 {
		t.Fatalf("frames %x", fr)
	}
	id, start, err := ParseReplayRequest([][]byte{{7}, {}, {0, 0, 0, 0, 0, 0, 0, 5}})
	if err != nil || start != 5 || id[0] != 7 {
		t.Fatalf("replay request: %v %d %v", id, start, err)
	}
	if _, _, err := ParseReplayRequest([][]byte{{7}, {0, 0, 0, 0, 0, 0, 0, 5}}); err == nil {
		t.Fatal("a two-frame request must be refused")
	}
	end := ReplayEndFrames([]byte{7})
	if hex.EncodeToString(end[2]) != "ffffffffffffffff" || len(end[3]) != 0 {
		t.Fatalf("end frames %x", end)
	}
}
