package kv

import (
	"fmt"
	"strconv"

	"github.com/narwhal-router/narwhal/transport/wire"
)

// Shape is what the router knows of an engine's KV cache layout, the parts on which a NIXL
// transfer between two engines depends. A zero field is unknown and never compared.
//
// vLLM refuses a pair in two places. The handshake first compares a compatibility hash
// (vllm/distributed/kv_transfer/kv_connector/v1/nixl/metadata.py,
// compute_nixl_compatibility_hash: vLLM and connector version, model, dtype, KV heads, head
// size, layers, attention backend, cache dtype, hybrid KV cache manager, speculative decoding,
// transfer mode); then it checks the geometry the hash leaves out, block size and tensor
// parallel size (_validate_remote_agent_handshake in nixl/base_worker.py). Of those the router
// can see the model (the engines' model lists), the block size and the cache dtype (the labels
// of vLLM's vllm:cache_config_info gauge, vllm/v1/metrics/loggers.py) and a producer's tensor
// parallel size (tp_size in its descriptors); the rest only shows as a failed handshake.
type Shape struct {
	// BlockSize is the KV block size in tokens (cache_config_info's block_size).
	BlockSize int
	// CacheDType is the KV cache dtype (cache_config_info's cache_dtype: "auto", "fp8", ...).
	CacheDType string
	// TP is the tensor parallel size (a producer's descriptors' tp_size).
	TP int
}

// Mismatch says why a producer of shape p cannot hand its KV cache to a consumer of shape c,
// or "" when nothing known stands in the way. The rule is strict where vLLM's is lenient in
// places: a different block size is refused (vLLM transfers across block sizes only in some
// layouts, never with the hybrid KV cache manager), and so is a different tensor parallel size
// (vLLM maps heterogeneous TP in principle, but asymmetric-TP handshakes fail in practice:
// vllm-project/vllm#50765).
func Mismatch(p, c Shape) string {
	switch {
	case p.CacheDType != "" && c.CacheDType != "" && p.CacheDType != c.CacheDType:
		return fmt.Sprintf("cache dtype %s ≠ %s", p.CacheDType, c.CacheDType)
	case p.BlockSize > 0 && c.BlockSize > 0 && p.BlockSize != c.BlockSize:
		return fmt.Sprintf("block size %d ≠ %d", p.BlockSize, c.BlockSize)
	case p.TP > 0 && c.TP > 0 && p.TP != c.TP:
		return fmt.Sprintf("tensor parallel size %d ≠ %d", p.TP, c.TP)
	}
	return ""
}

// DescriptorTP is the tensor parallel size a producer's handoff descriptor advertises (NIXL's
// tp_size), 0 when it names none.
func DescriptorTP(raw []byte) int {
	fields, err := wire.ScanObject(raw, nil)
	if err != nil {
		return 0
	}
	v, ok := wire.Member(raw, fields, "tp_size")
	if !ok {
		return 0
	}
	n, err := strconv.Atoi(string(v))
	if err != nil || n < 1 {
		return 0
	}
	return n
}
