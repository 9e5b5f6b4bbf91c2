package tests

import (
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/narwhal-router/narwhal/bench/sim"
)

// TestOfficialOpenAISDKTalksToNarwhal drives the router with the OpenAI JavaScript SDK: a
// streamed chat with usage, a non-streaming completion, an unknown model (the error envelope)
// and a stream that fails after its first tokens (the terminal error event must surface as an
// error in the SDK, after the tokens it already delivered). It needs Node.js and the SDK
// installed in tests/sdk (npm ci; .ci/run does it).
func TestOfficialOpenAISDKTalksToNarwhal(t *testing.T) {
	node, err := exec.LookPath("node")
	if err != nil {
		t.Skip("node is not installed")
	}
	if _, err := os.Stat(filepath.Join("sdk", "node_modules", "openai")); err != nil {
		t.Skip("the OpenAI SDK is not installed: run npm ci in tests/sdk")
	}
	h := start(t, setup{prefill: 1, decode: 1, engine: sim.Options{Tokens: 4}})
	cmd := exec.Command(node, "check.mjs", h.base+"/v1")
	cmd.Dir = "sdk"
	outb, err := cmd.Output()
	if err != nil {
		var stderr string
		if ee, ok := err.(*exec.ExitError); ok {
			stderr = string(ee.Stderr)
		}
		t.Fatalf("the SDK failed: %v\n%s", err, stderr)
	}
	var got struct {
		ChatStream, CompletionText, CompletionFinish, BrokenText string
		ChatUsage                                                int
		UnknownModel                                             struct {
			Status int
			Code   string
		}
		BrokenError *struct{ Name, Message string }
		Oversized   struct {
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
}
