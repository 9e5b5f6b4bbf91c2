package sim

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"io"
	"net/http"

	json "github.com/goccy/go-json"
)

// Before a consumer reads a producer's blocks for the first time, vLLM's NixlConnector
// handshakes with the producer's side channel and refuses a peer it cannot transfer with
// (vllm/distributed/kv_transfer/kv_connector/v1/nixl/base_worker.py):
//
//   - the compatibility hash first (nixl/metadata.py, compute_nixl_compatibility_hash: vLLM
//     and connector version, model, dtype, KV heads, head size, layers, attention backend,
//     cache dtype, ...), RuntimeError "NIXL compatibility hash mismatch" when it differs;
//   - then the geometry the hash leaves out (_validate_remote_agent_handshake): the simulator
//     refuses a different block size, as vLLM does with the hybrid KV cache manager, and a
//     different tensor parallel size, which vLLM maps in principle but whose handshakes fail
//     in practice (vllm-project/vllm#50765).
//
// The handshake's failure fails the request's KV load, which the decode then answers as vLLM's
// kv_load_failure_policy says (Options.KVLoadFailure). The simulator's hash covers what it
// models: its version, model and cache dtype (SetKVConfig changes the first and last at run
// time, as an operator restarting an engine with corrected flags would). Like the rest of the
// side channel it is JSON over HTTP: GET /kv/handshake.

const kvHandshakePath = "/kv/handshake"

// simConnectorVersion stands for NIXL_CONNECTOR_VERSION in the hash.
const simConnectorVersion = 12

// kvConfig is the part of an engine's configuration its handshake compares that may change at
// run time.
type kvConfig struct {
	Version    string
	CacheDType string
}

// handshakeInfo is what the producer's side channel answers a handshake with.
type handshakeInfo struct {
	EngineID          string `json:"engine_id"`
	CompatibilityHash string `json:"compatibility_hash"`
	BlockSize         int    `json:"block_size"`
	TPSize            int    `json:"tp_size"`
}

// SetKVConfig changes the version /version reports and the cache dtype /metrics reports, and
// with them the engine's compatibility hash ("" keeps a value).
func (e *Engine) SetKVConfig(version, cacheDType string) {
	c := *e.kvConfig()
	if version != "" {
		c.Version = version
	}
	if cacheDType != "" {
		c.CacheDType = cacheDType
	}
	e.kvcfg.Store(&c)
}

func (e *Engine) kvConfig() *kvConfig { return e.kvcfg.Load() }

// compatibilityHash is the engine's compute_nixl_compatibility_hash over the factors it models.
func (e *Engine) compatibilityHash() string {
	c := e.kvConfig()
	factors, _ := json.Marshal(map[string]any{
		"vllm_version": c.Version, "nixl_connector_version": simConnectorVersion,
		"model": e.opts.Models[0], "cache_dtype": c.CacheDType, "transfer_mode": "pull",
	})
	sum := sha256.Sum256(factors)
	return hex.EncodeToString(sum[:])
}

// serveKVHandshake is the producer side: its handshake metadata.
func (e *Engine) serveKVHandshake(w http.ResponseWriter, r *http.Request) {
	writeJSON(w, http.StatusOK, handshakeInfo{EngineID: e.EngineID(), CompatibilityHash: e.compatibilityHash(),
		BlockSize: e.opts.BlockSize, TPSize: e.opts.TPSize})
}

// handshake is the consumer side: it asks the producer at addr for its metadata and refuses it
// as vLLM would. The error is the request's KV load failure.
func (e *Engine) handshake(ctx context.Context, addr string) error {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, "http://"+addr+kvHandshakePath, nil)
	if err != nil {
		return fmt.Errorf("NIXL handshake with %s: %w", addr, err)
	}
	resp, err := e.kvClient.Do(req)
	if err != nil {
		return fmt.Errorf("NIXL handshake with %s: %w", addr, err)
	}
	defer resp.Body.Close()
	raw, err := io.ReadAll(io.LimitReader(resp.Body, 1<<20))
	if err != nil {
		return fmt.Errorf("NIXL handshake with %s: %w", addr, err)
	}
	var peer handshakeInfo
	if resp.StatusCode != http.StatusOK || json.Unmarshal(raw, &peer) != nil {
		return fmt.Errorf("NIXL handshake with %s: not a KV side channel (HTTP %d)", addr, resp.StatusCode)
	}
	if local := e.compatibilityHash(); peer.CompatibilityHash != local {
		// vLLM's own words (nixl/base_worker.py).
		return fmt.Errorf("NIXL compatibility hash mismatch. Local: %s, Remote: %s. Prefill and decode instances "+
			"have incompatible configurations. This may be due to: different vLLM versions, models, dtypes, "+
			"KV cache layouts, attention backends, etc. Both instances must use identical configurations",
			local, peer.CompatibilityHash)
	}
	if peer.BlockSize != e.opts.BlockSize {
		return fmt.Errorf("NIXL handshake with %s: remote block size %d differs from the local %d, "+
			"which the hybrid KV cache manager does not support", peer.EngineID, peer.BlockSize, e.opts.BlockSize)
	}
	if peer.TPSize != e.opts.TPSize {
		return fmt.Errorf("NIXL handshake with %s: remote tensor parallel size %d differs from the local %d",
			peer.EngineID, peer.TPSize, e.opts.TPSize)
	}
	return nil
}

// serveSetKVConfig takes {"version": V, "cache_dtype": D}; either may be omitted.
func (e *Engine) serveSetKVConfig(w http.ResponseWriter, r *http.Request) {
	var req struct {
		Version    string `json:"version"`
		CacheDType string `json:"cache_dtype"`
	}
	body, err := io.ReadAll(io.LimitReader(r.Body, 1<<20))
	if err == nil {
		err = json.Unmarshal(body, &req)
	}
	if err != nil {
		invalidRequest("version", `want {"version": V, "cache_dtype": D}`).write(w)
		return
	}
	e.SetKVConfig(req.Version, req.CacheDType)
	writeJSON(w, http.StatusOK, map[string]string{"version": e.kvConfig().Version, "cache_dtype": e.kvConfig().CacheDType})
}
