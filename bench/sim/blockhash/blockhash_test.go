package blockhash

import (
	"bytes"
	"encoding/hex"
	"os/exec"
	"strconv"
	"strings"
	"testing"
)

// python runs script with the first interpreter that can import mods, or skips the test.
func python(t *testing.T, script string, mods ...string) string {
	t.Helper()
	for _, py := range []string{"python3", "/usr/bin/python3"} {
		check := "import pickle"
		for _, m := range mods {
			check += ", " + m
		}
		if exec.Command(py, "-c", check).Run() != nil {
			continue
		}
		out, err := exec.Command(py, "-c", script).CombinedOutput()
		if err != nil {
			t.Fatalf("%s: %v\n%s", py, err, out)
		}
		return strings.TrimSpace(string(out))
	}
	t.Skipf("python3 with %v is not installed (Debian: python3-cbor2, python3-xxhash; .ci/run installs them)", mods)
	return ""
}

// Values covering every opcode and head size the encoders have, and what Python writes
// for them.
var samples = []struct {
	py  string
	go_ any
}{
	{`"0"`, "0"},
	{`(b"\x01"*32, (1, 255, 256, 65535, 65536, 2**31-1, 4000000000), None)`,
		Tuple{bytes.Repeat([]byte{1}, 32), Tuple{int64(1), int64(255), int64(256), int64(65535), int64(65536), int64(1<<31 - 1), int64(4000000000)}, nil}},
	{`(b"\x02"*16, (7,), ("adapter-a", "salt"))`, Tuple{bytes.Repeat([]byte{2}, 16), Tuple{int64(7)}, Tuple{"adapter-a", "salt"}}},
	{`(b"", (), (-1, -129, -2**31, -2**40))`, Tuple{[]byte{}, Tuple{}, Tuple{int64(-1), int64(-129), int64(-1 << 31), int64(-1 << 40)}}},
	{`("é"*200, b"x"*300, (1, 2))`, Tuple{strings.Repeat("é", 200), bytes.Repeat([]byte("x"), 300), Tuple{int64(1), int64(2)}}},
}

func TestPickleMatchesCPython(t *testing.T) {
	var script strings.Builder
	script.WriteString("import pickle\n")
	for _, s := range samples {
		script.WriteString("print(pickle.dumps(" + s.py + ", protocol=pickle.HIGHEST_PROTOCOL).hex())\n")
	}
	want := strings.Split(python(t, script.String()), "\n")
	for i, s := range samples {
		got, err := Pickle(s.go_)
		if err != nil {
			t.Fatal(err)
		}
		if hex.EncodeToString(got) != want[i] {
			t.Errorf("pickle %s:\n got %x\nwant %s", s.py, got, want[i])
		}
	}
}

func TestCBORMatchesCbor2(t *testing.T) {
	var script strings.Builder
	script.WriteString("import cbor2\n")
	for _, s := range samples {
		script.WriteString("print(cbor2.dumps(" + s.py + ", canonical=True).hex())\n")
	}
	want := strings.Split(python(t, script.String(), "cbor2"), "\n")
	for i, s := range samples {
		got, _ := CBOR(s.go_)
		if hex.EncodeToString(got) != want[i] {
			t.Errorf("cbor %s:\n got %x\nwant %s", s.py, got, want[i])
		}
	}
}

// chainScript is vLLM's init_none_hash and hash_block_tokens with a fixed PYTHONHASHSEED,
// over two blocks, the second with extra keys, for the named function.
const chainScript = `
import hashlib, pickle
try:
    import cbor2
except ImportError:
    cbor2 = None
try:
    import xxhash
except ImportError:
    xxhash = None
fns = {
    "sha256": lambda x: hashlib.sha256(pickle.dumps(x, protocol=pickle.HIGHEST_PROTOCOL)).digest(),
    "sha256_cbor": lambda x: hashlib.sha256(cbor2.dumps(x, canonical=True)).digest(),
    "xxhash": lambda x: xxhash.xxh3_128_digest(pickle.dumps(x, protocol=pickle.HIGHEST_PROTOCOL)),
    "xxhash_cbor": lambda x: xxhash.xxh3_128_digest(cbor2.dumps(x, canonical=True)),
}
fn = fns[ALGO]
none = fn("42")
b0 = fn((none, tuple(range(100, 116)), None))
b1 = fn((b0, tuple(range(300, 316)), ("lora-x", "salt")))
print(b0.hex(), b1.hex(), int.from_bytes(b1, "big") & ((1 << 64) - 1))
`

func TestChainedHashesMatchVLLM(t *testing.T) {
	mods := map[string][]string{SHA256: nil, SHA256CBOR: {"cbor2"}, XXHash: {"xxhash"}, XXHashCBOR: {"cbor2", "xxhash"}}
	for _, algo := range Algorithms {
		t.Run(algo, func(t *testing.T) {
			want := python(t, strings.Replace(chainScript, "ALGO", `"`+algo+`"`, 1), mods[algo]...)
			seed := "42"
			h, err := New(algo, &seed)
			if err != nil {
				t.Fatal(err)
			}
			tok := func(from int) []uint32 {
				var ts []uint32
				for i := range 16 {
					ts = append(ts, uint32(from+i))
				}
				return ts
			}
			b0 := h.Block(nil, tok(100), nil)
			b1 := h.Block(b0, tok(300), Tuple{"lora-x", "salt"})
			got := hex.EncodeToString(b0) + " " + hex.EncodeToString(b1) + " " + strconv.FormatUint(External(b1), 10)
			if got != want {
				t.Fatalf("got  %s\nwant %s", got, want)
			}
		})
	}
}

func TestRandomSeedDiffersPerHasher(t *testing.T) {
	a, _ := New(SHA256, nil)
	b, _ := New(SHA256, nil)
	if bytes.Equal(a.NoneHash(), b.NoneHash()) || len(a.NoneHash()) != 32 {
		t.Fatal("two unseeded hashers share NONE_HASH: the router could reproduce the engine's hashes")
	}
	if bytes.Equal(a.Block(nil, []uint32{1}, nil), b.Block(nil, []uint32{1}, nil)) {
		t.Fatal("same block hash under different seeds")
	}
}

func TestUnknownAlgorithm(t *testing.T) {
	if _, err := New("md5", nil); err == nil {
		t.Fatal("want an error")
	}
}
