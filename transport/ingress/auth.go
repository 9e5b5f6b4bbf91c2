package ingress

import (
	"bytes"
	"crypto/sha256"
	"crypto/subtle"
	"sync/atomic"

	"github.com/valyala/fasthttp"

	"github.com/narwhal-router/narwhal/transport/fault"
)

// keyring holds the client API keys (server.api_keys and server.api_keys_file) as SHA-256
// digests, never the keys themselves, and each key's requests in flight. No key, digest or
// part of one reaches a log line or a metric.
type keyring struct {
	digests  [][sha256.Size]byte
	inflight []*atomic.Int64
	limit    int64 // server.api_key_max_concurrency; 0 unbounded
}

// noKey is the slot of a request admitted without a key (authentication off).
const noKey = -1

// newKeyring holds keys; a key prev (the keyring before a reload, or nil) holds too keeps its
// count of requests in flight, so a reload neither resets nor loses what a key has running.
func newKeyring(keys []string, limit int, prev *keyring) *keyring {
	k := &keyring{limit: int64(limit)}
	for _, key := range keys {
		d := sha256.Sum256([]byte(key))
		n := new(atomic.Int64)
		if prev != nil {
			for i, pd := range prev.digests {
				if pd == d {
					n = prev.inflight[i]
				}
			}
		}
		k.digests = append(k.digests, d)
		k.inflight = append(k.inflight, n)
	}
	return k
}

// enabled reports whether requests need a key.
func (k *keyring) enabled() bool { return len(k.digests) > 0 }

var bearer = []byte("Bearer ")

// admit checks the request's key (Authorization: Bearer, else Anthropic's x-api-key: the same
// keys and limits) and takes a slot of its concurrency limit. A missing or wrong key is answered
// 401, a key at its limit 429 with Retry-After; ok is false then and the answer is written. The
// comparison takes the same time whichever key matches, or none: every digest is compared in
// constant time, with no early exit.
func (k *keyring) admit(ctx *fasthttp.RequestCtx) (slot int, ok bool) {
	if !k.enabled() {
		return noKey, true
	}
	key := ctx.Request.Header.Peek("Authorization")
	if len(key) > len(bearer) && bytes.EqualFold(key[:len(bearer)], bearer) {
		key = key[len(bearer):]
	} else if key = ctx.Request.Header.Peek("x-api-key"); len(key) == 0 { // Anthropic's header
		unauthorized(ctx, "missing API key: send Authorization: Bearer <key> or x-api-key: <key>")
		return noKey, false
	}
	d := sha256.Sum256(bytes.TrimSpace(key))
	slot = noKey
	for i := range k.digests {
		if subtle.ConstantTimeCompare(d[:], k.digests[i][:]) == 1 {
			slot = i
		}
	}
	if slot == noKey {
		unauthorized(ctx, "incorrect API key provided")
		return noKey, false
	}
	if k.limit > 0 {
		if k.inflight[slot].Add(1) > k.limit {
			k.inflight[slot].Add(-1)
			ctx.Response.Header.Set("Retry-After", "1")
			writeError(ctx, fasthttp.StatusTooManyRequests, fault.ErrorBody{
				Message: "this API key has too many requests in flight (server.api_key_max_concurrency)",
				Type:    "rate_limit_error", Code: "rate_limit_exceeded"})
			return noKey, false
		}
	}
	return slot, true
}

// release gives back the slot admit took.
func (k *keyring) release(slot int) {
	if slot != noKey && k.limit > 0 {
		k.inflight[slot].Add(-1)
	}
}

func unauthorized(ctx *fasthttp.RequestCtx, msg string) {
	ctx.Response.Header.Set("WWW-Authenticate", `Bearer realm="narwhal"`)
	writeError(ctx, fasthttp.StatusUnauthorized, fault.ErrorBody{Message: msg, Type: "invalid_request_error", Code: "invalid_api_key"})
}

// keyedDispatcher releases a request's key slot once its committed response has ended (the
// supervisor hears Finished exactly once per committed request).
type keyedDispatcher struct {
	Dispatcher
}

func (d keyedDispatcher) Finished(x *Exchange, m *StreamFinished) {
	d.Dispatcher.Finished(x, m)
	x.releaseKey()
}

// releaseKey gives back x's key slot, once.
func (x *Exchange) releaseKey() {
	if x.keys != nil {
		if slot := x.keySlot.Swap(noKey); slot != noKey {
			x.keys.release(int(slot))
		}
	}
}
