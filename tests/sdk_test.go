package tests

import (
	"encoding/json"
	"strings"
	"testing"

	"github.com/narwhal-router/narwhal/bench/sim"
	"github.com/narwhal-router/narwhal/config"
)

// TestOfficialOpenAISDKTalksToNarwhal drives the router with the OpenAI JavaScript SDK: a
// streamed chat with usage, a non-streaming completion, an unknown model (the error envelope),
// a stream that fails after its first tokens (the terminal error event must surface as an
// error in the SDK, after the tokens it already delivered), responses.create streaming and
// not (and its terminal error event, and previous_response_id refused), embeddings.create
// (the SDK's default base64 encoding), models.retrieve, all with an API key, and a wrong key. It needs Node.js and the SDK
// installed in tests/sdk (make sdk-deps, which make test runs, or npm ci there).
func TestOfficialOpenAISDKTalksToNarwhal(t *testing.T) {
	h := start(t, setup{prefill: 1, decode: 1, engine: sim.Options{Tokens: 4},
		config: func(c *config.Config) { c.Server.APIKeys = []string{"sdk-key"} }})
	outb := runSDKScript(t, "openai", "check.mjs", h.base+"/v1", "sdk-key")
	var got struct {
		ChatStream, CompletionText, CompletionFinish, BrokenText string
		ChatUsage                                                int
		UnknownModel                                             struct {
			Status int
			Code   string
		}
		BrokenError *struct{ Name, Message string }

		ResponsesStream, ResponseText, ResponseStatus string
		ResponsesBrokenText, ResponsesBrokenLast      string
		ResponsesEvents                               []string
		ResponsesUsage                                int
		PreviousResponse                              struct {
			Status int
			Param  string
		}
		Embeddings      []int
		Model           struct{ ID, Object string }
		UnknownRetrieve int
		WrongKey        struct {
			Status int
			Code   string
		}
		Oversized struct {
			Name, Code, Cause string
			Status            int
		}
	}
	if err := json.Unmarshal(outb, &got); err != nil {
		t.Fatalf("SDK output %q: %v", outb, err)
	}
	if got.ChatStream != expectedText(4) || got.ChatUsage != 4 {
		t.Errorf("streamed chat: %q, usage %d", got.ChatStream, got.ChatUsage)
	}
	if got.CompletionText != expectedText(3) || got.CompletionFinish != "length" {
		t.Errorf("completion: %q %q", got.CompletionText, got.CompletionFinish)
	}
	if got.UnknownModel.Status != 404 || got.UnknownModel.Code != "model_not_found" {
		t.Errorf("unknown model: %+v", got.UnknownModel)
	}
	if o := got.Oversized; o.Name != "APIError" || o.Status != 413 || o.Code != "request_too_large" {
		t.Errorf("9 MiB prompt: the SDK saw %+v, want a 413 APIError with code request_too_large", o)
	}
	if got.BrokenText != expectedText(2) || got.BrokenError == nil || !strings.Contains(got.BrokenError.Message, "closed before [DONE]") {
		t.Errorf("broken stream: text %q, error %+v", got.BrokenText, got.BrokenError)
	}
	if ev := got.ResponsesEvents; got.ResponsesStream != expectedText(3) || got.ResponsesUsage != 3 || len(ev) < 3 ||
		ev[0] != "response.created" || ev[len(ev)-1] != "response.incomplete" {
		t.Errorf("streamed response: %q, usage %d, events %v", got.ResponsesStream, got.ResponsesUsage, ev)
	}
	if got.ResponseText != expectedText(4) || got.ResponseStatus != "completed" {
		t.Errorf("response: %q %q", got.ResponseText, got.ResponseStatus)
	}
	if got.PreviousResponse.Status != 400 || got.PreviousResponse.Param != "previous_response_id" {
		t.Errorf("previous_response_id: %+v", got.PreviousResponse)
	}
	if got.ResponsesBrokenText != expectedText(2) || got.ResponsesBrokenLast != "error" {
		t.Errorf("broken response stream: %q, last event %q", got.ResponsesBrokenText, got.ResponsesBrokenLast)
	}
	if len(got.Embeddings) != 2 || got.Embeddings[0] != 8 || got.Embeddings[1] != 8 {
		t.Errorf("embeddings: %v", got.Embeddings)
	}
	if got.Model.ID != "sim-model" || got.Model.Object != "model" || got.UnknownRetrieve != 404 {
		t.Errorf("models.retrieve: %+v, unknown %d", got.Model, got.UnknownRetrieve)
	}
	if got.WrongKey.Status != 401 || got.WrongKey.Code != "invalid_api_key" {
		t.Errorf("wrong key: %+v", got.WrongKey)
	}
}
