package wire

import (
	"errors"
	"fmt"

	"github.com/goccy/go-json"
)

// Endpoint is the OpenAI API a request was made to. A prefill made for one endpoint can only feed
// a decode on the same endpoint.
type Endpoint uint8

// The generation endpoints (disaggregated), then the passthrough endpoints (one engine, the
// body forwarded as sent; see endpoints.go).
const (
	EndpointCompletions Endpoint = iota + 1
	EndpointChat
	EndpointResponses
	// EndpointMessages is Anthropic's Messages API, run on the engines' chat completions
	// (messages.go).
	EndpointMessages
	EndpointEmbeddings
	EndpointTokenize
	EndpointDetokenize
	EndpointScore
	EndpointRerank
	EndpointRerankBare
	EndpointRerankV2
	// EndpointCount bounds the endpoints, for tables indexed by Endpoint.
	EndpointCount
)

// Path is the engine-side URL path of the endpoint (the client-side one too, but for the
// Messages API: ClientPath).
func (e Endpoint) Path() string { return endpointInfo[e].path }

// ClientPath is the URL path clients call the endpoint at.
func (e Endpoint) ClientPath() string {
	if p := endpointInfo[e].client; p != "" {
		return p
	}
	return endpointInfo[e].path
}

// EngineShape is the endpoint whose request and stream shapes the engines see for e: chat for
// the Messages API (translated to chat on the way in), e itself otherwise. Code that reads the
// engine-bound body (a prompt's tokens, say) switches on it.
func (e Endpoint) EngineShape() Endpoint {
	if e == EndpointMessages {
		return EndpointChat
	}
	return e
}

// String names the endpoint in logs and metric tags.
func (e Endpoint) String() string {
	if n := endpointInfo[e].name; n != "" {
		return n
	}
	return "unknown"
}

// ClientBody is a validated client request body. It keeps the client's bytes and the offsets of
// their top-level members, so the engine-bound bodies are rewritten key by key rather than
// decoded and re-encoded.
type ClientBody struct {
	raw      []byte
	fields   []Field
	Endpoint Endpoint
	Model    string
	Stream   bool
	// IncludeUsage says the client asked for the usage chunk (stream_options.include_usage).
	IncludeUsage bool
	// streamOptions is the client's stream_options object, if it sent one.
	streamOptions []byte
}

// BadRequestError is a client mistake; the ingress answers 400 naming Param.
type BadRequestError struct {
	Param   string
	Message string
}

func (e *BadRequestError) Error() string { return e.Message }

func badRequest(param, format string, args ...any) *BadRequestError {
	return &BadRequestError{Param: param, Message: fmt.Sprintf(format, args...)}
}

// bodyError is the client's mistake ScanObject found in a request body.
func bodyError(err error) *BadRequestError {
	if errors.Is(err, ErrNotObject) {
		return badRequest("", "request body must be a JSON object")
	}
	return badRequest("", "request body is not valid JSON")
}

// ParseClientBody validates raw for endpoint ep. raw is not copied: the caller must keep it
// unchanged for as long as the ClientBody is used.
func ParseClientBody(ep Endpoint, raw []byte) (*ClientBody, error) {
	if ep == EndpointMessages {
		return parseMessagesBody(raw)
	}
	fields, err := ScanObject(raw, make([]Field, 0, 16))
	if err != nil {
		return nil, bodyError(err)
	}
	b := &ClientBody{raw: raw, fields: fields, Endpoint: ep}

	model, ok := b.member("model")
	if !ok || IsNull(model) {
		return nil, badRequest("model", "the model field is required")
	}
	if err := json.Unmarshal(model, &b.Model); err != nil || b.Model == "" {
		return nil, badRequest("model", "model must be a non-empty string")
	}

	switch ep {
	case EndpointCompletions:
		if v, ok := b.member("prompt"); !ok || IsNull(v) {
			return nil, badRequest("prompt", "the prompt field is required")
		} else if c := v[0]; c != '"' && c != '[' {
			return nil, badRequest("prompt", "prompt must be a string, an array of strings or an array of token ids")
		}
	case EndpointChat:
		v, ok := b.member("messages")
		if !ok || IsNull(v) {
			return nil, badRequest("messages", "the messages field is required")
		}
		if v[0] != '[' || v[SkipSpace(v, 1)] == ']' {
			return nil, badRequest("messages", "messages must be a non-empty array")
		}
	case EndpointResponses:
		if err := b.checkResponses(); err != nil {
			return nil, err
		}
	}

	if v, ok := b.member("stream"); ok && !IsNull(v) {
		if err := json.Unmarshal(v, &b.Stream); err != nil {
			return nil, badRequest("stream", "stream must be true or false")
		}
	}
	if v, ok := b.member("stream_options"); ok && !IsNull(v) {
		var so struct {
			IncludeUsage *bool `json:"include_usage"`
		}
		if v[0] != '{' || json.Unmarshal(v, &so) != nil {
			return nil, badRequest("stream_options", "stream_options must be an object like {\"include_usage\": true}")
		}
		// vLLM defaults include_usage to true once stream_options is present; so do we, so
		// the client gets what the engine alone would have sent it.
		b.IncludeUsage = so.IncludeUsage == nil || *so.IncludeUsage
		b.streamOptions = v
		// vLLM and OpenAI refuse stream options on a request that does not stream.
		if !b.Stream {
			return nil, badRequest("stream_options", "stream_options can only be set when stream is true")
		}
	}
	for _, key := range [...]string{"max_tokens", "max_completion_tokens", "max_output_tokens", "n"} {
		if v, ok := b.member(key); ok && !IsNull(v) {
			var n int64
			if err := json.Unmarshal(v, &n); err != nil || n < 1 {
				return nil, badRequest(key, "%s must be a positive integer", key)
			}
		}
	}
	if err := b.checkMinimums(); err != nil {
		return nil, err
	}
	return b, nil
}

// checkMinimums refuses a minimum above the maximum before any engine work: the decode engine
// would refuse it only after a prefill was paid for.
func (b *ClientBody) checkMinimums() *BadRequestError {
	limitKey := b.outputLimitKey()
	limit, hasLimit := b.intMember(limitKey)
	for _, key := range [...]string{"min_tokens", "min_completion_tokens"} {
		v, ok := b.member(key)
		if !ok || IsNull(v) {
			continue
		}
		var n int64
		if err := json.Unmarshal(v, &n); err != nil || n < 0 {
			return badRequest(key, "%s must be an integer, 0 or more", key)
		}
		if hasLimit && n > limit {
			return badRequest(key, "%s (%d) must be less than or equal to %s (%d)", key, n, limitKey, limit)
		}
	}
	return nil
}

// intMember reads an integer member; ok is false when it is absent, null or not an integer.
func (b *ClientBody) intMember(key string) (int64, bool) {
	v, ok := b.member(key)
	if !ok || IsNull(v) {
		return 0, false
	}
	var n int64
	if json.Unmarshal(v, &n) != nil {
		return 0, false
	}
	return n, true
}

// Raw is the client's body as sent, for the passthrough endpoints (nil after Release).
func (b *ClientBody) Raw() []byte { return b.raw }

// Release drops the client's bytes once no engine request will be built from them again; the
// parsed fields (model, stream, usage) stay.
func (b *ClientBody) Release() { b.raw, b.fields, b.streamOptions = nil, nil, nil }

// member returns the raw value of the last top-level member named key.
func (b *ClientBody) member(key string) ([]byte, bool) {
	return Member(b.raw, b.fields, key)
}

// IsNull reports whether a raw JSON value is null.
func IsNull(v []byte) bool { return len(v) == 4 && string(v) == "null" }

var (
	jsonTrue  = []byte("true")
	jsonFalse = []byte("false")
	jsonOne   = []byte("1")
	usageOnly = []byte(`{"include_usage":true}`)
)

// AppendPrefillBody appends the producer's body: the client body with stream off, no
// stream_options, one output token, no minimum, and kvParams as kv_transfer_params.
func (b *ClientBody) AppendPrefillBody(dst, kvParams []byte) []byte {
	e, n := b.prefillEdits(kvParams)
	return RewriteObject(dst, b.raw, b.fields, e[:n])
}

// PrefillLegBody is AppendPrefillBody's bytes as a LegBody, the client's bytes referenced.
func (b *ClientBody) PrefillLegBody(kvParams []byte) *LegBody {
	e, n := b.prefillEdits(kvParams)
	return segmentObject(b.raw, b.fields, e[:n])
}

// AppendDecodeBody appends the consumer's body: the client body, streaming with usage, and
// kvParams as kv_transfer_params; nil kvParams removes the key, client-sent or not.
func (b *ClientBody) AppendDecodeBody(dst, kvParams []byte) []byte {
	e, n := b.decodeEdits(kvParams)
	return RewriteObject(dst, b.raw, b.fields, e[:n])
}

// DecodeLegBody is AppendDecodeBody's bytes as a LegBody, the client's bytes referenced.
func (b *ClientBody) DecodeLegBody(kvParams []byte) *LegBody {
	e, n := b.decodeEdits(kvParams)
	return segmentObject(b.raw, b.fields, e[:n])
}

// legEdits holds a leg's edits by value, so that building a leg body allocates none.
type legEdits = [8]Edit

func (b *ClientBody) prefillEdits(kvParams []byte) (legEdits, int) {
	if b.Endpoint == EndpointResponses {
		return legEdits{
			{Key: "max_output_tokens", Value: jsonOne},
			{Key: "min_tokens"},
			{Key: "stream", Value: jsonFalse},
			{Key: "stream_options"},
			{Key: "store", Value: jsonFalse},
			{Key: "kv_transfer_params", Value: kvParams},
		}, 6
	}
	return legEdits{
		{Key: "max_tokens", Value: jsonOne},
		{Key: "max_completion_tokens", Value: jsonOne, OnlyIfPresent: true},
		{Key: "min_tokens"},
		{Key: "min_completion_tokens"},
		{Key: "stream", Value: jsonFalse},
		{Key: "stream_options"},
		{Key: "kv_transfer_params", Value: kvParams},
	}, 7
}

func (b *ClientBody) decodeEdits(kvParams []byte) (legEdits, int) {
	if b.Endpoint == EndpointResponses {
		return legEdits{
			{Key: "stream", Value: jsonTrue},
			{Key: "store", Value: jsonFalse},
			{Key: "kv_transfer_params", Value: kvParams},
		}, 3
	}
	streamOptions := usageOnly
	if b.streamOptions != nil && !b.IncludeUsage {
		streamOptions = b.withIncludeUsage()
	} else if b.streamOptions != nil {
		streamOptions = b.streamOptions
	}
	return legEdits{
		{Key: "stream", Value: jsonTrue},
		{Key: "stream_options", Value: streamOptions},
		{Key: "kv_transfer_params", Value: kvParams},
	}, 3
}

// withIncludeUsage returns the client's stream_options with include_usage forced on, keeping any
// other option (continuous_usage_stats, ...) the client chose.
func (b *ClientBody) withIncludeUsage() []byte {
	fields, err := ScanObject(b.streamOptions, nil)
	if err != nil {
		return usageOnly
	}
	return RewriteObject(nil, b.streamOptions, fields, []Edit{{Key: "include_usage", Value: jsonTrue}})
}
