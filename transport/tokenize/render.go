package tokenize

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"strings"

	"github.com/narwhal-router/narwhal/config"
	"github.com/narwhal-router/narwhal/transport/wire"
)

// The render call asks a vLLM for a request's token ids. Shapes are vLLM's:
//
//   - render (vllm/entrypoints/serve/render/api_router.py): POST /v1/completions/render with
//     the CompletionRequest answers a list of GenerateRequest, POST /v1/chat/completions/render
//     with the ChatCompletionRequest one GenerateRequest
//     (vllm/entrypoints/serve/disagg/protocol.py), whose token_ids are the prompt's tokens
//     after the chat template. The client's body is sent as it is.
//   - tokenize (vllm/entrypoints/serve/tokenize/protocol.py): POST /tokenize with
//     {"model", "prompt"} or {"model", "messages"} answers {"count", "max_model_len",
//     "tokens", "token_strs"}.
//
// The Responses API has no render endpoint: its requests are placed on the estimate.

// maxRenderBytes bounds a render answer: token ids take at most 11 bytes each in JSON, so a
// 1M-token prompt fits.
const maxRenderBytes = 16 << 20

// renderError is why a render gave no tokens, as the metric counts it.
type renderError struct {
	reason string
	err    error
}

func (e *renderError) Error() string { return e.reason + ": " + e.err.Error() }

func fail(reason string, format string, args ...any) *renderError {
	return &renderError{reason, fmt.Errorf(format, args...)}
}

// render asks base for the token ids of body under api.
func (t *Tokenizer) render(ctx context.Context, base, api string, body *wire.ClientBody) ([]uint32, *renderError) {
	path, payload, rerr := renderRequest(api, body)
	if rerr != nil {
		return nil, rerr
	}
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, strings.TrimSuffix(base, "/")+path, bytes.NewReader(payload))
	if err != nil {
		return nil, &renderError{"error", err}
	}
	req.Header.Set("Content-Type", "application/json")
	resp, err := t.hc.Do(req)
	if err != nil {
		if ctx.Err() != nil {
			return nil, &renderError{"timeout", err}
		}
		return nil, &renderError{"error", err}
	}
	defer resp.Body.Close()
	raw, err := io.ReadAll(io.LimitReader(resp.Body, maxRenderBytes+1))
	switch {
	case err != nil && ctx.Err() != nil:
		return nil, &renderError{"timeout", err}
	case err != nil:
		return nil, &renderError{"error", err}
	case resp.StatusCode != http.StatusOK:
		return nil, fail("status", "%s answered %d", path, resp.StatusCode)
	case len(raw) > maxRenderBytes:
		return nil, fail("decode", "%s answered over %d bytes", path, maxRenderBytes)
	}
	ids, err := renderAnswer(api, body.Endpoint.EngineShape(), raw)
	if err != nil {
		return nil, &renderError{"decode", fmt.Errorf("%s: %w", path, err)}
	}
	return ids, nil
}

// renderRequest is the path and body of the call for body under api.
func renderRequest(api string, body *wire.ClientBody) (string, []byte, *renderError) {
	ep := body.Endpoint.EngineShape()
	if ep != wire.EndpointCompletions && ep != wire.EndpointChat {
		return "", nil, fail("unsupported", "no render for %s", ep.Path())
	}
	if api == config.RenderAPIRender {
		return ep.Path() + "/render", body.Raw(), nil
	}
	req := map[string]json.RawMessage{}
	model, _ := json.Marshal(body.Model)
	req["model"] = model
	key := "prompt"
	if ep == wire.EndpointChat {
		key = "messages"
	}
	v, ok := body.Lookup(key)
	if !ok {
		return "", nil, fail("unsupported", "no %s", key)
	}
	req[key] = v
	b, err := json.Marshal(req)
	if err != nil {
		return "", nil, &renderError{"error", err}
	}
	return "/tokenize", b, nil
}

// renderAnswer reads the token ids of an answer.
func renderAnswer(api string, ep wire.Endpoint, raw []byte) ([]uint32, error) {
	type generateRequest struct {
		TokenIDs []uint32 `json:"token_ids"`
	}
	switch {
	case api == config.RenderAPITokens:
		var a struct {
			Tokens []uint32 `json:"tokens"`
		}
		if err := json.Unmarshal(raw, &a); err != nil || a.Tokens == nil {
			return nil, fmt.Errorf("not a TokenizeResponse (%v)", err)
		}
		return a.Tokens, nil
	case ep == wire.EndpointChat:
		var a generateRequest
		if err := json.Unmarshal(raw, &a); err != nil || a.TokenIDs == nil {
			return nil, fmt.Errorf("not a GenerateRequest (%v)", err)
		}
		return a.TokenIDs, nil
	}
	var a []generateRequest
	if err := json.Unmarshal(raw, &a); err != nil || len(a) == 0 || a[0].TokenIDs == nil {
		return nil, fmt.Errorf("not a list of GenerateRequest (%v)", err)
	}
	return a[0].TokenIDs, nil // several prompts: the first stands for the request, as for the estimate
}
