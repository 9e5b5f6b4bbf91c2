// Package blockhash computes prefix-cache block hashes as vLLM does (vllm/v1/core/
// kv_cache_utils.py, hash_block_tokens and init_none_hash; vllm/utils/hashing.py for the
// functions): block i's hash is hash_fn((parent, tuple(token_ids), extra_keys)), parent being
// block i−1's hash or, for the first block, NONE_HASH; NONE_HASH is 32 random bytes per
// process, or hash_fn(PYTHONHASHSEED) when that is set, so two processes agree only when they
// share the seed. The hash functions (--prefix-caching-hash-algo) serialize that tuple with
// Python's pickle (protocol 5) or canonical CBOR and digest it with SHA-256 or XXH3-128:
//
//	sha256       sha256(pickle.dumps(x, HIGHEST_PROTOCOL))     32 bytes (vLLM's default)
//	sha256_cbor  sha256(cbor2.dumps(x, canonical=True))        32 bytes
//	xxhash       xxh3_128(pickle.dumps(x, HIGHEST_PROTOCOL))   16 bytes
//	xxhash_cbor  xxh3_128(cbor2.dumps(x, canonical=True))      16 bytes
//
// The package encodes exactly the values those tuples hold (bytes, str, int, None, tuples);
// pickle.go and cbor.go say how. External is the integer KV events carry.
package blockhash

import (
	"crypto/rand"
	"crypto/sha256"
	"encoding/binary"
	"fmt"

	"github.com/zeebo/xxh3"
)

// The algorithms of vLLM's --prefix-caching-hash-algo.
const (
	SHA256     = "sha256"
	SHA256CBOR = "sha256_cbor"
	XXHash     = "xxhash"
	XXHashCBOR = "xxhash_cbor"
)

// Algorithms lists the accepted algorithm names, the default first.
var Algorithms = []string{SHA256, SHA256CBOR, XXHash, XXHashCBOR}

// Tuple is a Python tuple; the other values are []byte, string, int64 and nil (None).
type Tuple []any

// Func is one of vLLM's hash functions.
type Func func(v any) ([]byte, error)

// FuncByName returns the hash function of an algorithm name.
func FuncByName(name string) (Func, error) {
	switch name {
	case SHA256:
		return digest(Pickle, sha), nil
	case SHA256CBOR:
		return digest(CBOR, sha), nil
	case XXHash:
		return digest(Pickle, xxh), nil
	case XXHashCBOR:
		return digest(CBOR, xxh), nil
	}
	return nil, fmt.Errorf("unsupported prefix caching hash algorithm %q (want one of %v)", name, Algorithms)
}

func sha(b []byte) []byte { s := sha256.Sum256(b); return s[:] }

func xxh(b []byte) []byte { d := xxh3.Hash128(b).Bytes(); return d[:] }

func digest(enc func(any) ([]byte, error), sum func([]byte) []byte) Func {
	return func(v any) ([]byte, error) {
		b, err := enc(v)
		if err != nil {
			return nil, err
		}
		return sum(b), nil
	}
}

// Hasher chains block hashes for one engine process.
type Hasher struct {
	fn   Func
	none []byte
}

// New returns a Hasher for algorithm algo. seed is PYTHONHASHSEED: nil draws NONE_HASH
// from crypto/rand (vLLM's os.urandom(32)), else NONE_HASH = hash_fn(*seed).
func New(algo string, seed *string) (*Hasher, error) {
	fn, err := FuncByName(algo)
	if err != nil {
		return nil, err
	}
	h := &Hasher{fn: fn}
	if seed == nil {
		h.none = make([]byte, 32)
		if _, err := rand.Read(h.none); err != nil {
			return nil, fmt.Errorf("blockhash: random seed: %w", err)
		}
	} else if h.none, err = fn(*seed); err != nil {
		return nil, fmt.Errorf("blockhash: hash seed: %w", err)
	}
	return h, nil
}

// NoneHash is the parent of every prompt's first block.
func (h *Hasher) NoneHash() []byte { return h.none }

// Block is hash_block_tokens: the hash of a full block of tokens after parent (nil: the
// first block), with extra keys (nil: None; else a tuple such as the LoRA name or the
// cache salt).
func (h *Hasher) Block(parent []byte, tokens []uint32, extra Tuple) []byte {
	if len(parent) == 0 {
		parent = h.none
	}
	toks := make(Tuple, len(tokens))
	for i, t := range tokens {
		toks[i] = int64(t)
	}
	var ek any
	if extra != nil {
		ek = extra
	}
	d, err := h.fn(Tuple{parent, toks, ek})
	if err != nil {
		panic(fmt.Sprintf("blockhash: %v", err)) // never: the tuple holds only encodable values
	}
	return d
}

// External is a block hash as KV events carry it with VLLM_KV_EVENTS_USE_INT_BLOCK_HASHES
// (vLLM's default): the digest's last 8 bytes as a big-endian integer.
func External(hash []byte) uint64 {
	var tail [8]byte
	copy(tail[8-min(len(hash), 8):], hash[max(len(hash)-8, 0):])
	return binary.BigEndian.Uint64(tail[:])
}
