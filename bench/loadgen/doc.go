// Package loadgen is the benchmark's load generator: the process that plays the clients.
//
// It owns the arms a benchmark compares and nothing else:
//
//   - direct: the generator itself runs a request exactly as the router would — it builds the
//     prefill body, calls a producer with transport.EngineClient.Prefill, hands the
//     PrefillResult to a consumer's Decode and reads the SSE stream to [DONE] — so the arm is
//     the router's own engine-side code minus the router: the physical limit of two HTTP legs;
//   - routed: one streaming chat request to Narwhal over fasthttp, read to its single outcome;
//   - peer and baseline: the same request to the peer proxy (bench/peer) or to a second
//     Narwhal, another build, each at its own address and read exactly like a routed one.
//
// A Phase says how to drive one arm: closed loop at a concurrency, open loop at a rate (latency
// counted from each request's scheduled start, so a stalled system cannot hide its queueing),
// or hold (open N long streams and keep them). Every request ends in one Outcome: a success,
// an error (an HTTP status or a terminal SSE error event), or a violation of the
// one-outcome contract (no response, a truncated stream, both an error and [DONE], a
// duplicated or out-of-order token). A Result carries counts, the error mix, the violations
// and latency samples (microseconds), and can be merged across windows; Summarize turns
// samples into percentiles (nearest rank over the sorted samples, no binning).
//
// The generator runs in its own process (Serve: one JSON command per stdin line, one JSON
// message per stdout line) so that its CPU is never the router's; bench/harness drives it.
package loadgen
