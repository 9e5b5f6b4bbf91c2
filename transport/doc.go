// Package transport owns everything Narwhal puts on the wire: the client-facing OpenAI ingress
// (fasthttp), the relay that copies a committed decode stream to its client, the EngineClient
// that runs the prefill and decode legs against an engine, SSE reading, the body rewrites of the
// two legs (key by key, never re-encoding the client's JSON), and the handoff descriptor's
// validation and connectors.
//
// The engine-side API is usable on its own:
//
//	res, err := producer.Prefill(ctx, req)        // PrefillResult: descriptor, producer, endpoint, backend request ID
//	stream, err := consumer.Decode(ctx, res, req) // validates the descriptor, returns at the first token
//
// Pass the PrefillResult of Prefill directly to Decode; PrefillResult.Parameters returns a
// detached copy of the descriptor for inspection. Cancelling ctx aborts a leg at any point (the
// engine connection is closed, so the engine frees the sequence).
//
// Connectors: a KV transfer mechanism is one kv.Connector (connector.go); NIXL is nixl.go. A
// connector whose legs run concurrently — Mooncake, where the router chooses a transfer_id and
// the producer's remote_bootstrap_addr before either leg starts — also implements
// ConcurrentConnector: the request supervisor then starts both legs at once with the planned
// parameters, and Validate checks the plan instead of a producer response.
//
// Only the EngineClient, PrefillResult, Request, DecodeStream and fault.Fault types are meant for use
// outside Narwhal, and even they are internal APIs that may change between releases.
package transport
