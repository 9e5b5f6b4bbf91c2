// Package wire owns the bytes of the OpenAI and vLLM wire formats that the router reads or
// rewrites, without any I/O: the JSON object scanner (member offsets, no decoding), the client
// body's validation and the key-by-key rewrites of the prefill and decode bodies (the client's
// JSON is never re-encoded), the API endpoints, the SSE event reader and classifier, and the
// assembly of a non-streaming response from a decode stream's events.
package wire
