// Package transport is the engine client and the attempt runner. EngineClient runs the legs of
// an attempt against one vLLM-compatible engine (request construction, the allowlisted headers,
// connection handling, timeouts, SSE reading up to the first token and after it) and the small
// GET endpoints probes use. Run carries out one planned attempt — the producer's connector plans
// the transfer, the prefill leg, the handoff's checks, the decode leg to its first token, or a
// passthrough request's one leg — and returns one Outcome; client requests, readmission probes
// (ProbeTransfer) and preflight all run their attempts through it. The client is usable on its
// own:
//
//	res, err := producer.Prefill(ctx, req)        // PrefillResult: descriptor, producer, endpoint, backend request ID
//	stream, err := consumer.Decode(ctx, res, req) // validates the descriptor, returns at the first token
//
// Pass the PrefillResult of Prefill directly to Decode; PrefillResult.Parameters returns a
// detached copy of the descriptor for inspection. Cancelling ctx aborts a leg at any point (the
// engine connection is closed, so the engine frees the sequence). Clients are built from a
// provisioned engine (EngineSpec): Provisioner is the one way from an engine entry of any
// source — the file, the admin API, a discovery source — to it: its URL parsed, its connector
// resolved against the registry, its KV side assembled.
//
// The rest of the wire lives in the packages below this one: transport/wire (JSON scanning,
// body rewrites, SSE), transport/kv (handoff descriptors and connectors), transport/fault (what
// a failure means), and above it transport/ingress (the client side) and transport/preflight.
//
// Only EngineClient, EngineSpec, Provisioner, Request, PrefillResult, DecodeStream, Plan, Run and fault.Fault are meant
// for use outside Narwhal, and even they are internal APIs that may change between releases.
package transport
