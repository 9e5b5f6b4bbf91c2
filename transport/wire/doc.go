// Package wire owns the bytes of the OpenAI and vLLM wire formats that the router reads or
// rewrites, without any I/O: the one JSON grammar its scanners are built on (jsongrammar.go:
// offsets, no decoding, accepting what json.Valid accepts) and the object scan on it, the
// error-object check, the client body's validation and the key-by-key rewrites of the prefill
// and decode bodies (the client's JSON is never re-encoded), the API endpoints, the SSE event
// reader and classifier, and the assembly of a non-streaming response from a decode stream's
// events. It imports nothing of Narwhal's, so every other package (fault among them) may use it.
package wire
