package sim

import (
	"bytes"
	"fmt"
	"mime"
	"net/http"
	"strings"

	json "github.com/goccy/go-json"
)

// leg classifies a request the way the simulator serves it.
type leg uint8

const (
	legNone    leg = iota // not a generation (health, models, admin, a body that did not parse)
	legPrefill            // kv_transfer_params.do_remote_decode == true
	legDecode             // every other generation
)

func (l leg) String() string {
	switch l {
	case legPrefill:
		return "prefill"
	case legDecode:
		return "decode"
	}
	return "other"
}

// endpoint is the OpenAI API a generation came through.
type endpoint uint8

const (
	completionsAPI endpoint = iota
	chatAPI
	responsesAPI
)

// maxLogprobs is vLLM's default --max-logprobs.
const maxLogprobs = 20

// wireRequest holds the fields of a completions or chat body the simulator reads;
// everything else is accepted and ignored, as vLLM ignores unknown fields.
type wireRequest struct {
	Model               *string                    `json:"model"`
	Prompt              json.RawMessage            `json:"prompt"`
	Messages            json.RawMessage            `json:"messages"`
	MaxTokens           *int                       `json:"max_tokens"`
	MaxCompletionTokens *int                       `json:"max_completion_tokens"`
	Input               json.RawMessage            `json:"input"`        // Responses API
	Instructions        json.RawMessage            `json:"instructions"` // Responses API
	MaxOutputTokens     *int                       `json:"max_output_tokens"`
	N                   *int                       `json:"n"`
	Stream              *bool                      `json:"stream"`
	StreamOptions       *wireStreamOptions         `json:"stream_options"`
	Logprobs            json.RawMessage            `json:"logprobs"`
	TopLogprobs         *int                       `json:"top_logprobs"`
	KVTransferParams    map[string]json.RawMessage `json:"kv_transfer_params"`
	CacheSalt           *string                    `json:"cache_salt"`
}

type wireStreamOptions struct {
	IncludeUsage *bool `json:"include_usage"`
}

type wireMessage struct {
	Role    *string         `json:"role"`
	Content json.RawMessage `json:"content"`
}

type wireContentPart struct {
	Type string `json:"type"`
	Text string `json:"text"`
}

// genRequest is a validated generation request.
type genRequest struct {
	api          endpoint
	leg          leg
	n            int // choices (completions and chat; 1 on the Responses API, which has no n)
	model        string
	promptTokens int
	maxTokens    int // explicit max_tokens / max_completion_tokens, 0 if absent
	stream       bool
	includeUsage bool
	logprobs     int  // completions: top-N alternatives; chat: top_logprobs
	wantLogprobs bool // logprobs requested at all
	kvParams     map[string]json.RawMessage
	instructions json.RawMessage // Responses API, echoed in the response
	directives   []fault
	tokenIDs     []uint32  // the prompt's token ids
	keys         extraKeys // LoRA adapter and cache salt, the extra block-hash keys
	hashes       []uint64  // block hashes of the prompt's full blocks (capacity model only)
}

// maxN bounds n, the choices of one request.
const maxN = 128

// parseGeneration validates a completions or chat body the way vLLM would for the
// cases a router can get wrong, and classifies its leg.
func (e *Engine) parseGeneration(api endpoint, r *http.Request, body []byte) (*genRequest, *apiError) {
	if mt, _, _ := mime.ParseMediaType(r.Header.Get("Content-Type")); mt != "application/json" {
		return nil, invalidRequest("", "Unsupported Media Type: Only 'application/json' is allowed")
	}
	var w wireRequest
	if err := json.Unmarshal(body, &w); err != nil {
		return nil, invalidRequest("", "invalid JSON body: "+err.Error())
	}
	g := &genRequest{api: api, leg: legDecode, kvParams: w.KVTransferParams}
	if bytes.Equal(w.KVTransferParams["do_remote_decode"], []byte("true")) {
		g.leg = legPrefill
	}

	var text string // where directives are looked for
	var err *apiError
	switch api {
	case chatAPI:
		g.tokenIDs, text, err = parseMessages(e.tok, w.Messages)
	case responsesAPI:
		g.tokenIDs, text, err = parseInput(e.tok, w.Input, w.Instructions)
		g.instructions = w.Instructions
	default:
		g.tokenIDs, text, err = parsePrompt(e.tok, w.Prompt)
	}
	if err != nil {
		return nil, err
	}
	g.promptTokens = max(len(g.tokenIDs), 1)
	if w.CacheSalt != nil {
		if *w.CacheSalt == "" {
			return nil, invalidRequest("cache_salt", "Parameter 'cache_salt' must be a non-empty string if provided.")
		}
		g.keys.salt = *w.CacheSalt
	}

	g.stream = w.Stream != nil && *w.Stream
	if w.StreamOptions != nil {
		if !g.stream {
			return nil, invalidRequest("stream_options", "Stream options can only be defined when `stream=True`.")
		}
		// vLLM's StreamOptions.include_usage defaults to true when the object is present.
		g.includeUsage = w.StreamOptions.IncludeUsage == nil || *w.StreamOptions.IncludeUsage
		if api == responsesAPI {
			g.includeUsage = false // a Responses stream always ends with its usage
		}
	}
	if err := g.parseLogprobs(w); err != nil {
		return nil, err
	}

	// vLLM accepts a missing model and serves its first one.
	g.model = e.opts.Models[0]
	if w.Model != nil && *w.Model != "" {
		if !e.serves(*w.Model) {
			return nil, newError(http.StatusNotFound, "model", fmt.Sprintf("The model `%s` does not exist.", *w.Model))
		}
		g.model = *w.Model
		g.keys.lora, g.keys.loraID = e.loraOf(g.model)
	}
	g.n = 1
	if w.N != nil && api != responsesAPI { // vLLM's ResponsesRequest has no n: it is ignored there
		if *w.N < 1 {
			return nil, newError(http.StatusBadRequest, "n", fmt.Sprintf("n must be at least 1, got %d.", *w.N))
		}
		if *w.N > maxN {
			return nil, newError(http.StatusBadRequest, "n", fmt.Sprintf("n must be at most %d, got %d.", maxN, *w.N))
		}
		g.n = *w.N
	}

	limit := w.MaxTokens
	if api == chatAPI && w.MaxCompletionTokens != nil {
		limit = w.MaxCompletionTokens
	}
	if api == responsesAPI {
		limit = w.MaxOutputTokens
	}
	maxLen := e.opts.MaxModelLen
	if g.promptTokens >= maxLen {
		return nil, newError(http.StatusBadRequest, "input_tokens", fmt.Sprintf(
			"This model's maximum context length is %d tokens. However, your request has %d input tokens. "+
				"Please reduce the length of the input messages.", maxLen, g.promptTokens))
	}
	if limit != nil {
		if *limit < 1 {
			return nil, newError(http.StatusBadRequest, "max_tokens", fmt.Sprintf("max_tokens must be at least 1, got %d.", *limit))
		}
		if g.promptTokens+*limit > maxLen {
			return nil, newError(http.StatusBadRequest, "max_tokens", fmt.Sprintf(
				"'max_tokens' or 'max_completion_tokens' is too large: %d. This model's maximum context length is %d "+
					"tokens and your request has %d input tokens (%d > %d - %d).",
				*limit, maxLen, g.promptTokens, *limit, maxLen, g.promptTokens))
		}
		g.maxTokens = *limit
	}

	if g.leg == legPrefill && g.n > 1 {
		return nil, newError(http.StatusBadRequest, "n",
			"The simulator serves prefill legs (kv_transfer_params.do_remote_decode=true) with n=1 only.")
	}
	if g.leg == legPrefill && g.stream {
		return nil, newError(http.StatusBadRequest, "stream",
			"The simulator serves prefill legs (kv_transfer_params.do_remote_decode=true) non-streaming only.")
	}
	if text != "" {
		ds, derr := parseDirectives(text, api == chatAPI)
		if derr != nil {
			param := "prompt"
			switch api {
			case chatAPI:
				param = "messages"
			case responsesAPI:
				param = "input"
			}
			return nil, newError(http.StatusBadRequest, param, derr.Error())
		}
		g.directives = ds
	}
	if e.sched != nil {
		g.hashes = blockHashes(e.hasher, g.tokenIDs, e.opts.BlockSize, g.keys)
	}
	return g, nil
}

func (g *genRequest) parseLogprobs(w wireRequest) *apiError {
	raw := w.Logprobs
	if len(raw) == 0 || string(raw) == "null" {
		if w.TopLogprobs != nil && g.api == chatAPI {
			return invalidRequest("top_logprobs", "when using `top_logprobs`, `logprobs` must be set to true.")
		}
		return nil
	}
	if g.api == chatAPI {
		var on bool
		if err := json.Unmarshal(raw, &on); err != nil {
			return invalidRequest("logprobs", "logprobs: input should be a valid boolean")
		}
		if w.TopLogprobs != nil {
			if !on {
				return invalidRequest("top_logprobs", "when using `top_logprobs`, `logprobs` must be set to true.")
			}
			if *w.TopLogprobs < 0 {
				return invalidRequest("top_logprobs", "`top_logprobs` must be a positive value.")
			}
			g.logprobs = *w.TopLogprobs
		}
		g.wantLogprobs = on
	} else {
		if err := json.Unmarshal(raw, &g.logprobs); err != nil {
			return invalidRequest("logprobs", "logprobs: input should be a valid integer")
		}
		if g.logprobs < 0 {
			return invalidRequest("logprobs", "`logprobs` must be a positive value.")
		}
		g.wantLogprobs = true
	}
	if g.logprobs > maxLogprobs {
		return newError(http.StatusBadRequest, "logprobs", fmt.Sprintf(
			"Requested sample logprobs of %d, which is greater than max allowed: %d", g.logprobs, maxLogprobs))
	}
	return nil
}

// messageText joins the text of a message's content: a string, null, or a list of
// content parts of which only text parts count.
func messageText(raw json.RawMessage) (string, error) {
	if len(raw) == 0 || string(raw) == "null" {
		return "", nil
	}
	if raw[0] == '"' {
		var s string
		err := json.Unmarshal(raw, &s)
		return s, err
	}
	var parts []wireContentPart
	if err := json.Unmarshal(raw, &parts); err != nil {
		return "", fmt.Errorf("want a string or a list of content parts")
	}
	var b strings.Builder
	for _, p := range parts {
		if p.Type == "text" {
			if b.Len() > 0 {
				b.WriteByte(' ')
			}
			b.WriteString(p.Text)
		}
	}
	return b.String(), nil
}
