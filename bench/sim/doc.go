// Package sim is a vLLM-faithful engine simulator for Narwhal's tests, demo and benchmark.
//
// One Engine looks, from a router's side, like one vLLM OpenAI server running the NIXL
// connector: it serves /v1/completions and /v1/chat/completions (streaming and not) with
// vLLM's byte shapes, the render endpoints, /tokenize, /detokenize, /health, /v1/models, /version and /metrics. A request whose
// kv_transfer_params says do_remote_decode=true is a prefill leg: the engine generates
// one token, pins KV "blocks" under a lease and advertises them in kv_transfer_params.
// A request with do_remote_prefill=true reads those blocks from the producer over a
// loopback side channel (HTTP POST /kv/read on the producer's KV endpoint), so a wrong
// engine identity, expired lease or wrong endpoint really fails.
//
// The package owns the latency model (TTFT, per-prompt-token prefill time, inter-token
// gap, output length), deterministic output (token i is always the same word), fault
// injection per request (@sim:<leg>.<fault>[=<arg>] directives in the prompt) and per
// engine (the /sim/ admin endpoints or InjectFault), and the counters tests use to prove
// that nothing leaked (served, aborted, blocks pinned/read/expired).
//
// Prompts are token ids, as in vLLM: a byte-level BPE tokenizer read from a Hugging Face
// tokenizer.json (tokenizer/) and the ChatML chat template; with the capacity model their
// full blocks are hashed as vLLM hashes them (blockhash/: chained sha256 over pickle by
// default, seeded per start), and KV events are written from vLLM's own definitions
// (kvwire/), never with the router's decoder. It does not sample. By
// default every generation is timed on its own, as if capacity were unbounded; the
// capacity model (Options.MaxNumSeqs > 0) adds a vLLM-like scheduler per engine: a
// bounded running batch and a waiting queue, continuous batching whose step time grows
// with the batch and with prefill work, a KV cache of a fixed number of blocks with a
// prefix cache, and a cost per KV block transferred (scheduler.go, kvcache.go). Only n=1
// and a single prompt per request are supported.
//
// This is an internal API of Narwhal; it may change between releases.
package sim
