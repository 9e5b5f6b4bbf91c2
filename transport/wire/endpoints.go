package wire

import "github.com/goccy/go-json"

// endpointInfo is each endpoint's path and metric name. The passthrough endpoints run on one
// engine with the client's body forwarded as sent; only the generation endpoints are
// disaggregated.
var endpointInfo = [EndpointCount]struct {
	path, name  string
	client      string // the client-side path, when it is not path
	passthrough bool
}{
	EndpointCompletions: {path: "/v1/completions", name: "completions"},
	EndpointChat:        {path: "/v1/chat/completions", name: "chat"},
	EndpointResponses:   {path: "/v1/responses", name: "responses"},
	EndpointMessages:    {path: "/v1/chat/completions", client: "/v1/messages", name: "messages"},
	EndpointEmbeddings:  {path: "/v1/embeddings", name: "embeddings", passthrough: true},
	EndpointTokenize:    {path: "/tokenize", name: "tokenize", passthrough: true},
	EndpointDetokenize:  {path: "/detokenize", name: "detokenize", passthrough: true},
	EndpointScore:       {path: "/v1/score", name: "score", passthrough: true},
	EndpointRerank:      {path: "/v1/rerank", name: "rerank", passthrough: true},
	EndpointRerankBare:  {path: "/rerank", name: "rerank", passthrough: true},
	EndpointRerankV2:    {path: "/v2/rerank", name: "rerank_v2", passthrough: true},
}

// Passthrough reports whether the endpoint runs on one engine with the body forwarded byte for
// byte (no prefill/decode split).
func (e Endpoint) Passthrough() bool { return e < EndpointCount && endpointInfo[e].passthrough }

// EndpointForPath returns the endpoint served at a client path.
func EndpointForPath(path []byte) (Endpoint, bool) {
	for e := EndpointCompletions; e < EndpointCount; e++ {
		if e.ClientPath() == string(path) {
			return e, true
		}
	}
	return 0, false
}

// ParsePassthroughBody checks a passthrough body: a JSON object whose model, when present, is a
// non-empty string. vLLM lets /tokenize, /detokenize and the rerank endpoints omit the model
// (the engine's own is meant); defaultModel stands in for it, and an empty defaultModel makes
// the model required. The body is kept as sent (Raw).
func ParsePassthroughBody(ep Endpoint, raw []byte, defaultModel string) (*ClientBody, error) {
	fields, err := ScanObject(raw, make([]Field, 0, 8))
	if err != nil {
		return nil, bodyError(err)
	}
	b := &ClientBody{raw: raw, fields: fields, Endpoint: ep}
	model, ok := b.member("model")
	if !ok || IsNull(model) {
		if defaultModel == "" {
			return nil, badRequest("model", "the model field is required (the fleet serves more than one model)")
		}
		b.Model = defaultModel
		return b, nil
	}
	if err := json.Unmarshal(model, &b.Model); err != nil || b.Model == "" {
		return nil, badRequest("model", "model must be a non-empty string")
	}
	return b, nil
}
