// Package blockkey owns the router's own names for prompt blocks of token ids: the keys under
// which the exact prefix index holds what an engine's KV events say it cached, and under which
// a prompt's tokens are looked up. They are chained as vLLM chains its block hashes
// (vllm/v1/core/kv_cache_utils.py, hash_block_tokens): block i's key covers block i−1's key,
// its own token ids and its extra keys, so two prompts share keys[:k] exactly when (barring
// collisions) their first k blocks of tokens and the extra keys on them are equal.
//
// The engine's own hashes cannot serve: vLLM hashes with --prefix-caching-hash-algo (sha256
// over pickle by default, also sha256_cbor, xxhash, xxhash_cbor) from a seed that is random per
// process unless PYTHONHASHSEED is set, so no two engines and no router agree on them. A key
// is a hash of the same inputs the router can see on both sides — the token ids a BlockStored
// carries, and the token ids of a prompt — so any algorithm and any seed work.
//
// Extra keys are vLLM's generate_block_hash_extra_keys: the LoRA adapter's name on every
// block, the request's cache_salt on the first block only (and multimodal identifiers, which
// the router never computes for a prompt: such a block never matches). So an adapter's blocks
// never match the base model's, and salted prompts only match the same salt.
//
// Keys are in their own domain: the top bit is set, and the word-block hashes of the estimate
// (wire.Prompt) have it clear, so a key list says which it is (IsKey).
package blockkey

import (
	"encoding/binary"
	"hash/maphash"
)

// domain is the bit every key carries.
const domain = 1 << 63

// seed is the process's: keys never leave it.
var seed = maphash.MakeSeed()

// IsKey says whether k is a token-block key (and not a word-block hash of the estimate).
func IsKey(k uint64) bool { return k&domain != 0 }

// Block returns the key of one block: its tokens and extra keys, following parent (ok false:
// the first block of a prompt).
func Block(parent uint64, ok bool, tokens []uint32, extra []string) uint64 {
	var h maphash.Hash
	h.SetSeed(seed)
	var buf [8]byte
	if ok {
		binary.LittleEndian.PutUint64(buf[:], parent)
		_, _ = h.Write(buf[:])
	} else {
		_ = h.WriteByte(0) // a first block differs from any block whose parent is 0
	}
	binary.LittleEndian.PutUint32(buf[:4], uint32(len(tokens)))
	_, _ = h.Write(buf[:4])
	for _, t := range tokens {
		binary.LittleEndian.PutUint32(buf[:4], t)
		_, _ = h.Write(buf[:4])
	}
	for _, e := range extra { // length-prefixed, so ("ab","c") and ("a","bc") differ
		binary.LittleEndian.PutUint32(buf[:4], uint32(len(e)))
		_, _ = h.Write(buf[:4])
		_, _ = h.WriteString(e)
	}
	return h.Sum64() | domain
}

// Extra are a request's extra keys, as vLLM derives them.
type Extra struct {
	// Adapter is the LoRA adapter's name ("" for the base model).
	Adapter string
	// Salt is the request's cache_salt ("" for none).
	Salt string
}

// Of returns block i's extra keys (nil: none, vLLM's None), into dst.
func (x Extra) Of(i int, dst []string) []string {
	dst = dst[:0]
	if x.Adapter != "" {
		dst = append(dst, x.Adapter)
	}
	if i == 0 && x.Salt != "" {
		dst = append(dst, x.Salt)
	}
	return dst
}

// Keys appends to dst the keys of ids' full blocks of size tokens, chained from the first.
func Keys(dst []uint64, ids []uint32, size int, x Extra) []uint64 {
	if size < 1 {
		return dst
	}
	var parent uint64
	var extra []string
	for i := 0; (i+1)*size <= len(ids); i++ {
		extra = x.Of(i, extra)
		parent = Block(parent, i > 0, ids[i*size:(i+1)*size], extra)
		dst = append(dst, parent)
	}
	return dst
}
