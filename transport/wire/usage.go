package wire

import (
	"bytes"
	"strconv"
)

// The usage correction. After a KV transfer the consumer reports the transferred prompt as
// cached (vLLM counts the loaded tokens in prompt_tokens_details.cached_tokens, all but the last
// prompt token), although the fleet computed it on the producer a moment before. What a client
// and its billing must see is the fleet's split: the prompt tokens that no engine computed for
// this request are the ones the producer found in its own prefix cache. So for a request that
// paid a prefill leg, cached_tokens is the producer's cached_tokens (0 when it reported none),
// and prompt_tokens stays as the consumer reported it. The Responses API's
// input_tokens_details.cached_tokens is corrected the same way. A local decode (no prefill leg) is not
// corrected: the consumer computed the prompt and its count is the truth.

var (
	detailsKey      = []byte(`"prompt_tokens_details"`)
	inputDetailsKey = []byte(`"input_tokens_details"`) // the Responses API's name
	cachedKey       = []byte(`"cached_tokens"`)
)

// cachedTokensValue finds the number of usage.prompt_tokens_details.cached_tokens in b: its
// start and end offsets, or ok false when b has none (no details, null details).
func cachedTokensValue(b []byte) (start, end int, ok bool) {
	key := detailsKey
	i := bytes.LastIndex(b, key) // the usage object is the last member of a chunk or body
	if i < 0 {
		key = inputDetailsKey
		if i = bytes.LastIndex(b, key); i < 0 {
			return 0, 0, false
		}
	}
	rest := b[i+len(key):]
	j := bytes.Index(rest, cachedKey)
	if k := bytes.IndexByte(rest, '}'); j < 0 || (k >= 0 && k < j) {
		return 0, 0, false // null details, or cached_tokens outside them
	}
	p := i + len(key) + j + len(cachedKey)
	for p < len(b) && (b[p] == ' ' || b[p] == ':') {
		p++
	}
	q := p
	for q < len(b) && b[q] >= '0' && b[q] <= '9' {
		q++
	}
	if q == p {
		return 0, 0, false
	}
	return p, q, true
}

// CachedTokens reads usage.prompt_tokens_details.cached_tokens from a response body or chunk,
// 0 when it is absent or null.
func CachedTokens(b []byte) int {
	p, q, ok := cachedTokensValue(b)
	if !ok {
		return 0
	}
	n, _ := strconv.Atoi(string(b[p:q]))
	return n
}

// CorrectCachedTokens appends to dst a copy of b (a usage chunk, as SSE event bytes or as its
// data) whose cached_tokens is cached; it reports false, appending nothing, when b reports no
// cached_tokens or already says cached.
func CorrectCachedTokens(dst, b []byte, cached int) ([]byte, bool) {
	p, q, ok := cachedTokensValue(b)
	if !ok {
		return dst, false
	}
	var num [20]byte
	v := strconv.AppendInt(num[:0], int64(cached), 10)
	if bytes.Equal(b[p:q], v) {
		return dst, false
	}
	dst = append(dst, b[:p]...)
	dst = append(dst, v...)
	return append(dst, b[q:]...), true
}

// Tokens is what an engine's usage object counts: the prompt (input) tokens, the completion
// (output) tokens and the cached part of the prompt, each -1 when the object does not say.
type Tokens struct {
	Prompt, Completion, Cached int
}

// TokensOf reads the usage of an event's data or a response body, scanned in place without
// decoding or allocating: its top-level "usage" object (the completions APIs' usage chunk and
// bodies, embeddings) or its "response"."usage" (a Responses stream's final event). ok is
// false when it carries no usage object.
func TokensOf(data []byte) (t Tokens, ok bool) {
	var top, inner [16]Field
	fields, err := ScanObject(data, top[:0])
	if err != nil {
		return Tokens{-1, -1, -1}, false
	}
	usage, ok := Member(data, fields, "usage")
	if !ok {
		resp, found := Member(data, fields, "response")
		if !found {
			return Tokens{-1, -1, -1}, false
		}
		if fields, err = ScanObject(resp, inner[:0]); err != nil {
			return Tokens{-1, -1, -1}, false
		}
		if usage, ok = Member(resp, fields, "usage"); !ok {
			return Tokens{-1, -1, -1}, false
		}
	}
	return UsageTokens(usage)
}

// UsageTokens reads a usage object itself (what an assembler keeps): prompt_tokens or the
// Responses API's input_tokens, completion_tokens or output_tokens, and the cached_tokens of
// prompt_tokens_details or input_tokens_details. ok is false when usage is not an object.
func UsageTokens(usage []byte) (Tokens, bool) {
	t := Tokens{-1, -1, -1}
	var fields, details [16]Field
	fs, err := ScanObject(usage, fields[:0])
	if err != nil {
		return t, false
	}
	count := func(obj []byte, fs []Field, keys ...string) int {
		for _, k := range keys {
			if v, ok := Member(obj, fs, k); ok {
				if n, err := strconv.Atoi(string(v)); err == nil && n >= 0 {
					return n
				}
			}
		}
		return -1
	}
	t.Prompt = count(usage, fs, "prompt_tokens", "input_tokens")
	t.Completion = count(usage, fs, "completion_tokens", "output_tokens")
	for _, k := range [...]string{"prompt_tokens_details", "input_tokens_details"} {
		if d, ok := Member(usage, fs, k); ok {
			if ds, err := ScanObject(d, details[:0]); err == nil {
				t.Cached = count(d, ds, "cached_tokens")
				break
			}
		}
	}
	return t, true
}
