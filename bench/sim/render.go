package sim

import (
	"net/http"
	"strconv"
	"time"
)

// The render endpoints (vllm/entrypoints/serve/render/api_router.py): a router or a
// GPU-less `vllm launch render` turns a request into the tokens the engine would see.
//
//	POST /v1/completions/render       CompletionRequest     → [GenerateRequest]
//	POST /v1/chat/completions/render  ChatCompletionRequest → GenerateRequest
//
// GenerateRequest (vllm/entrypoints/serve/disagg/protocol.py) is dumped in its field order:
// request_id, token_ids, features, sampling_params, model, stream, stream_options,
// cache_salt, priority, kv_transfer_params. The request is validated as a generation is
// (model, context length, cache_salt), so render and generation agree on the token ids.
// sampling_params carries n and max_tokens only (vLLM writes its whole SamplingParams).

var renderPaths = [...]string{"/v1/completions/render", "/v1/chat/completions/render"}

func (e *Engine) serveRender(api endpoint) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		body, ok := e.readRecorded(w, r, time.Now())
		if !ok {
			return
		}
		req, apiErr := e.parseGeneration(api, r, body)
		if apiErr != nil {
			apiErr.write(w)
			return
		}
		prefix := "cmpl-"
		if api == chatAPI {
			prefix = "chatcmpl-"
		}
		var b []byte
		if api == completionsAPI {
			b = append(b, '[')
		}
		b = appendGenerateRequest(b, responseID(r, prefix), req)
		if api == completionsAPI {
			b = append(b, ']')
		}
		w.Header().Set("Content-Type", "application/json")
		w.WriteHeader(http.StatusOK)
		_, _ = w.Write(b)
	}
}

func appendGenerateRequest(b []byte, id string, req *genRequest) []byte {
	b = append(b, `{"request_id":`...)
	b = appendString(b, id)
	b = append(b, `,"token_ids":`...)
	b = appendIDs(b, req.tokenIDs)
	b = append(b, `,"features":null,"sampling_params":{"n":`...)
	b = strconv.AppendInt(b, int64(req.n), 10)
	b = append(b, `,"max_tokens":`...)
	if req.maxTokens > 0 {
		b = strconv.AppendInt(b, int64(req.maxTokens), 10)
	} else {
		b = append(b, "null"...)
	}
	b = append(b, `},"model":`...)
	b = appendString(b, req.model)
	b = append(b, `,"stream":`...)
	b = strconv.AppendBool(b, req.stream)
	b = append(b, `,"stream_options":null,"cache_salt":`...)
	if req.keys.salt != "" {
		b = appendString(b, req.keys.salt)
	} else {
		b = append(b, "null"...)
	}
	b = append(b, `,"priority":0,"kv_transfer_params":null}`...)
	return b
}
