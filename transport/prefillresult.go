package transport

import (
	"time"

	"github.com/goccy/go-json"

	"github.com/narwhal-router/narwhal/transport/kv"
	"github.com/narwhal-router/narwhal/transport/wire"
)

// PrefillResult is what a prefill leg hands to the decode leg: the producer's handoff descriptor
// together with the producer, the API endpoint and the backend request ID that produced it, and
// when the prefill leg started (the handoff's age counts from then). Pass it to Decode as is.
type PrefillResult struct {
	descriptor *kv.Descriptor
	producerKV kv.Side
	connector  kv.Connector // the producer's: it validates the descriptor

	// Producer is the producer engine's name; ProducerURL its base URL.
	Producer    string
	ProducerURL string
	// Endpoint is the API the prefill ran on; only a decode on the same endpoint may use it.
	Endpoint wire.Endpoint
	// BackendRequestID is the X-Request-Id both legs of the attempt carry.
	BackendRequestID string
	// Started is when the prefill leg started; Completed when its response was fully read.
	Started   time.Time
	Completed time.Time
	// CachedTokens is the producer's usage.prompt_tokens_details.cached_tokens (0 if none):
	// the prompt tokens it did not compute, the true cached count after a transfer
	// (wire.CorrectCachedTokens).
	CachedTokens int
}

// HasDescriptor reports whether the producer returned a handoff descriptor (it may return null).
func (r PrefillResult) HasDescriptor() bool { return r.descriptor != nil }

// Descriptor returns the raw kv_transfer_params exactly as the producer sent them, or nil. The
// slice belongs to the result: do not modify it.
func (r PrefillResult) Descriptor() []byte {
	if r.descriptor == nil {
		return nil
	}
	return r.descriptor.Raw()
}

// Parameters returns a detached copy of the descriptor for inspection: changing the map changes
// nothing that Decode sends. It returns nil when there is no descriptor.
func (r PrefillResult) Parameters() map[string]any {
	if r.descriptor == nil {
		return nil
	}
	var m map[string]any
	if err := json.Unmarshal(r.descriptor.Raw(), &m); err != nil {
		return nil
	}
	return m
}

// Age is how old the handoff is at now: the time since the prefill leg started.
func (r PrefillResult) Age(now time.Time) time.Duration { return now.Sub(r.Started) }

// WithoutTransfer returns the result stripped of its descriptor, for a decode that must not load
// remote KV: same-worker decode, or a missing descriptor under handoff.on_missing: recompute.
func (r PrefillResult) WithoutTransfer() PrefillResult {
	r.descriptor = nil
	return r
}
