package sim

import (
	"encoding/base64"
	"encoding/binary"
	"encoding/hex"
	"fmt"
	"io"
	"math"
	"mime"
	"net/http"
	"strconv"
	"strings"
	"time"

	json "github.com/goccy/go-json"
	"github.com/google/uuid"

	"github.com/narwhal-router/narwhal/bench/sim/tokenizer"
)

// The non-generative endpoints vLLM serves next to the generation ones: /v1/embeddings,
// /tokenize, /detokenize, /v1/score, /v1/rerank (also /rerank and /v2/rerank). A router
// forwards them to one engine as they are, so the simulator answers them in vLLM's shapes:
// /tokenize and /detokenize with the engine's tokenizer (bench/sim/tokenizer; chat messages
// through the ChatML template), and deterministic values elsewhere: an embedding is 8 floats
// derived from the input's token ids, a score or relevance is a fixed function of the two
// texts. The engine-level faults of
// the decode leg apply (a router's only leg for these): refuse, status, hang_headers,
// slow_headers, slow_first_token (answer delayed) and close_after (connection dropped).
// They are recorded with their bodies under leg "other".

// passthroughPaths are the endpoints served here, for route registration and recording.
var passthroughPaths = [...]string{"/v1/embeddings", "/tokenize", "/detokenize", "/v1/score", "/v1/rerank", "/rerank", "/v2/rerank"}

type passthroughRequest struct {
	Model    *string         `json:"model"`
	Input    json.RawMessage `json:"input"`
	Prompt   *string         `json:"prompt"`
	Messages json.RawMessage `json:"messages"`
	Tokens   []int64         `json:"tokens"`
	// /tokenize: vLLM's TokenizeCompletionRequest / TokenizeChatRequest options.
	AddSpecialTokens    *bool           `json:"add_special_tokens"`
	AddGenerationPrompt *bool           `json:"add_generation_prompt"`
	ReturnTokenStrs     bool            `json:"return_token_strs"`
	Text1               json.RawMessage `json:"text_1"`
	Text2               json.RawMessage `json:"text_2"`
	Query               *string         `json:"query"`
	Documents           []string        `json:"documents"`
	TopN                *int            `json:"top_n"`
	Encoding            string          `json:"encoding_format"`
}

// readRecorded reads a non-generation request's body and records it; on a read error it
// answers 400 and returns false.
func (e *Engine) readRecorded(w http.ResponseWriter, r *http.Request, arrived time.Time) ([]byte, bool) {
	body, err := io.ReadAll(io.LimitReader(r.Body, maxBodyBytes))
	e.recorded.add(newRecord(legNone, r, body, arrived))
	if err != nil {
		invalidRequest("", "cannot read the request body: "+err.Error()).write(w)
		return nil, false
	}
	return body, true
}

func (e *Engine) servePassthrough(w http.ResponseWriter, r *http.Request) {
	arrived := time.Now()
	body, ok := e.readRecorded(w, r, arrived)
	if !ok {
		return
	}
	if mt, _, _ := mime.ParseMediaType(r.Header.Get("Content-Type")); mt != "application/json" {
		invalidRequest("", "Unsupported Media Type: Only 'application/json' is allowed").write(w)
		return
	}
	var req passthroughRequest
	if err := json.Unmarshal(body, &req); err != nil {
		invalidRequest("", "invalid JSON body: "+err.Error()).write(w)
		return
	}
	model := e.opts.Models[0]
	if req.Model != nil && *req.Model != "" {
		if !e.serves(*req.Model) {
			newError(http.StatusNotFound, "model", fmt.Sprintf("The model `%s` does not exist.", *req.Model)).write(w)
			return
		}
		model = *req.Model
	}

	f := newFaultPlan()
	e.faults.applyTo(&f, legDecode)
	wait := f.slowHeaders + f.slow + e.opts.TTFT
	switch {
	case f.refuse:
		refuse(w)
		return
	case f.hangHeaders || f.hangFirstToken || f.silenceAfter >= 0:
		<-r.Context().Done()
		return
	}
	if wait > 0 {
		t := time.NewTimer(wait)
		select {
		case <-t.C:
		case <-r.Context().Done():
			t.Stop()
			return
		}
	}
	switch {
	case f.status != 0:
		simulatedError(f.status).write(w)
		return
	case f.closeAfter >= 0:
		panic(http.ErrAbortHandler)
	}

	var out []byte
	var apiErr *apiError
	switch r.URL.Path {
	case "/v1/embeddings":
		out, apiErr = embeddingsBody(r, e.tok, model, req, arrived)
	case "/tokenize":
		out, apiErr = tokenizeBody(e.tok, req, e.opts.MaxModelLen)
	case "/detokenize":
		out, apiErr = detokenizeBody(e.tok, req)
	case "/v1/score":
		out, apiErr = scoreBody(r, e.tok, model, req, arrived)
	default:
		out, apiErr = rerankBody(r, e.tok, model, req)
	}
	if apiErr != nil {
		apiErr.write(w)
		return
	}
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(http.StatusOK)
	_, _ = w.Write(out)
}

func responseID(r *http.Request, prefix string) string {
	rid := r.Header.Get("X-Request-Id")
	if rid == "" {
		u := uuid.New()
		rid = hex.EncodeToString(u[:])
	}
	return prefix + rid
}

// stringsOf reads a string or a list of strings; ok is false for anything else.
func stringsOf(raw json.RawMessage) ([]string, bool) {
	var one string
	if json.Unmarshal(raw, &one) == nil {
		return []string{one}, true
	}
	var many []string
	if json.Unmarshal(raw, &many) == nil && len(many) > 0 {
		return many, true
	}
	return nil, false
}

func usageJSON(b []byte, tokens int) []byte {
	return fmt.Appendf(b, `"usage":{"prompt_tokens":%d,"total_tokens":%d,"completion_tokens":0,"prompt_tokens_details":null}`, tokens, tokens)
}

func embeddingsBody(r *http.Request, tok *tokenizer.Tokenizer, model string, req passthroughRequest, arrived time.Time) ([]byte, *apiError) {
	inputs, ok := stringsOf(req.Input)
	if !ok {
		return nil, invalidRequest("input", "input must be a string or a non-empty list of strings")
	}
	b := fmt.Appendf(nil, `{"id":%q,"object":"list","created":%d,"model":%q,"data":[`, responseID(r, "embd-"), arrived.Unix(), model)
	tokens := 0
	for i, in := range inputs {
		ids := tok.Encode(in)
		tokens += len(ids)
		if i > 0 {
			b = append(b, ',')
		}
		b = fmt.Appendf(b, `{"index":%d,"object":"embedding","embedding":`, i)
		vec := make([]float64, 8)
		for k := range vec {
			var sum int64
			for _, id := range ids {
				sum += int64(id>>k) & 7
			}
			vec[k] = float64(sum%8) / 8
		}
		if req.Encoding == "base64" { // vLLM: little-endian float32s, base64
			raw := make([]byte, 0, 4*len(vec))
			for _, v := range vec {
				raw = binary.LittleEndian.AppendUint32(raw, math.Float32bits(float32(v)))
			}
			b = appendString(b, base64.StdEncoding.EncodeToString(raw))
		} else {
			b = append(b, '[')
			for k, v := range vec {
				if k > 0 {
					b = append(b, ',')
				}
				b = appendFloat(b, v)
			}
			b = append(b, ']')
		}
		b = append(b, '}')
	}
	b = append(b, "],"...)
	b = usageJSON(b, tokens)
	return append(b, '}'), nil
}

// tokenizeBody answers /tokenize as vLLM's serve/tokenize does: a prompt is encoded with
// add_special_tokens (default true; this tokenizer adds none), messages are rendered with the
// chat template (add_generation_prompt defaults to true) first; token_strs only when asked.
func tokenizeBody(tok *tokenizer.Tokenizer, req passthroughRequest, maxLen int) ([]byte, *apiError) {
	var text string
	switch {
	case req.Prompt != nil:
		text = *req.Prompt
	case len(req.Messages) > 0:
		msgs, err := chatMessages(req.Messages)
		if err != nil {
			return nil, err
		}
		text = tokenizer.ChatML(msgs, req.AddGenerationPrompt == nil || *req.AddGenerationPrompt)
	default:
		return nil, invalidRequest("prompt", "Field required: prompt or messages")
	}
	ids := tok.Encode(text)
	b := fmt.Appendf(nil, `{"count":%d,"max_model_len":%d,"tokens":`, len(ids), maxLen)
	b = appendIDs(b, ids)
	if !req.ReturnTokenStrs {
		return append(b, `,"token_strs":null}`...), nil
	}
	b = append(b, `,"token_strs":[`...)
	for i, id := range ids {
		if i > 0 {
			b = append(b, ',')
		}
		b = appendString(b, tok.TokenString(id))
	}
	return append(b, "]}"...), nil
}

func appendIDs(b []byte, ids []uint32) []byte {
	b = append(b, '[')
	for i, id := range ids {
		if i > 0 {
			b = append(b, ',')
		}
		b = strconv.AppendUint(b, uint64(id), 10)
	}
	return append(b, ']')
}

// detokenizeBody answers /detokenize: the text of the ids, special tokens included, or a
// 400 naming an id outside the vocabulary.
func detokenizeBody(tok *tokenizer.Tokenizer, req passthroughRequest) ([]byte, *apiError) {
	if req.Tokens == nil {
		return nil, invalidRequest("tokens", "Field required: tokens")
	}
	ids := make([]uint32, len(req.Tokens))
	for i, id := range req.Tokens {
		if id < 0 || id > math.MaxUint32 {
			return nil, invalidRequest("tokens", fmt.Sprintf("token id %d is out of vocabulary", id))
		}
		ids[i] = uint32(id)
	}
	text, err := tok.Decode(ids, false)
	if err != nil {
		return nil, invalidRequest("tokens", err.Error())
	}
	b := append([]byte(`{"prompt":`), appendString(nil, text)...)
	return append(b, '}'), nil
}

// relevance is the simulator's score of two texts: the share of b's words also in a.
func relevance(a, b string) float64 {
	in := map[string]bool{}
	for _, w := range strings.Fields(a) {
		in[w] = true
	}
	words := strings.Fields(b)
	if len(words) == 0 {
		return 0
	}
	n := 0
	for _, w := range words {
		if in[w] {
			n++
		}
	}
	return float64(n) / float64(len(words))
}

func scoreBody(r *http.Request, tok *tokenizer.Tokenizer, model string, req passthroughRequest, arrived time.Time) ([]byte, *apiError) {
	t1, ok1 := stringsOf(req.Text1)
	t2, ok2 := stringsOf(req.Text2)
	if !ok1 {
		return nil, invalidRequest("text_1", "text_1 must be a string or a non-empty list of strings")
	}
	if !ok2 {
		return nil, invalidRequest("text_2", "text_2 must be a string or a non-empty list of strings")
	}
	b := fmt.Appendf(nil, `{"id":%q,"object":"list","created":%d,"model":%q,"data":[`, responseID(r, "score-"), arrived.Unix(), model)
	tokens := 0
	for i, t := range t2 {
		q := t1[min(i, len(t1)-1)]
		tokens += tok.Count(q) + tok.Count(t)
		if i > 0 {
			b = append(b, ',')
		}
		b = fmt.Appendf(b, `{"index":%d,"object":"score","score":`, i)
		b = appendFloat(b, relevance(q, t))
		b = append(b, '}')
	}
	b = append(b, "],"...)
	b = usageJSON(b, tokens)
	return append(b, '}'), nil
}

func rerankBody(r *http.Request, tok *tokenizer.Tokenizer, model string, req passthroughRequest) ([]byte, *apiError) {
	if req.Query == nil {
		return nil, invalidRequest("query", "Field required: query")
	}
	if len(req.Documents) == 0 {
		return nil, invalidRequest("documents", "documents must be a non-empty list of strings")
	}
	n := len(req.Documents)
	if req.TopN != nil && *req.TopN > 0 && *req.TopN < n {
		n = *req.TopN
	}
	// Results by relevance, highest first; ties keep document order.
	order := make([]int, len(req.Documents))
	score := make([]float64, len(req.Documents))
	tokens := tok.Count(*req.Query)
	for i, d := range req.Documents {
		order[i], score[i] = i, relevance(*req.Query, d)
		tokens += tok.Count(d)
	}
	for i := 1; i < len(order); i++ {
		for j := i; j > 0 && score[order[j]] > score[order[j-1]]; j-- {
			order[j], order[j-1] = order[j-1], order[j]
		}
	}
	b := fmt.Appendf(nil, `{"id":%q,"model":%q,"usage":{"total_tokens":%d},"results":[`, responseID(r, "rerank-"), model, tokens)
	for k, i := range order[:n] {
		if k > 0 {
			b = append(b, ',')
		}
		b = fmt.Appendf(b, `{"index":%d,"document":{"text":`, i)
		b = appendString(b, req.Documents[i])
		b = append(b, `},"relevance_score":`...)
		b = appendFloat(b, score[i])
		b = append(b, '}')
	}
	return append(b, "]}"...), nil
}
