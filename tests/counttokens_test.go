package tests

import (
	"encoding/json"
	"net"
	"strings"
	"testing"
	"time"

	"github.com/narwhal-router/narwhal/bench/sim"
	"github.com/narwhal-router/narwhal/config"
)

// TestCountTokensIsWhatTheEngineCounts: POST /v1/messages/count_tokens answers the prompt tokens
// the engine then reports for a Messages request with the same fields, whether the router
// tokenizes itself (source local: tokenizer.json and the chat template) or asks the engines
// (source render); a render that cannot be reached is a 502 naming it, not a guess. Each answer
// has its access-log line.
func TestCountTokensIsWhatTheEngineCounts(t *testing.T) {
	closed, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	gone := "http://" + closed.Addr().String()
	closed.Close()
	fields := `"model":"sim-model","system":"You are terse.","messages":[{"role":"user","content":"How many tokens is this sentence, counted as the engine counts it?"},` +
		`{"role":"assistant","content":"Ask the tokenizer."},{"role":"user","content":[{"type":"text","text":"Then ask it."}]}]`
	for _, c := range []struct {
		name string
		src  config.TokenSource
	}{
		{"local", config.TokenSource{Source: config.TokensLocal, TokenizerJSON: simTokenizer, ChatTemplate: config.ChatTemplateML, RenderAPI: config.RenderAPIRender}},
		{"render", config.TokenSource{Source: config.TokensRender, RenderAPI: config.RenderAPIRender}},
		{"render unreachable", config.TokenSource{Source: config.TokensRender, RenderAPI: config.RenderAPIRender, RenderURL: gone}},
	} {
		t.Run(c.name, func(t *testing.T) {
			h := start(t, setup{both: 1, engine: sim.Options{Tokens: 2, PromptTokensDetails: true},
				config: func(cfg *config.Config) {
					c.src.BlockSize = sim.DefaultBlockSize
					cfg.Placement.Tokens.Default = c.src
					cfg.Placement.Tokens.RenderTimeoutS = 0.5
				}})
			resp, b := h.post("/v1/messages/count_tokens", "{"+fields+"}")
			if c.src.RenderURL != "" {
				if resp.StatusCode != 502 || !strings.Contains(string(b), `"api_error"`) || !strings.Contains(string(b), "/render") {
					t.Fatalf("count_tokens with its render unreachable: %d %s, want a 502 naming the render", resp.StatusCode, b)
				}
				h.expectAccessLine(func(l map[string]any) bool { return l["status"] == 502.0 && l["endpoint"] == "messages" })
				return
			}
			var count struct {
				InputTokens *int `json:"input_tokens"`
			}
			if resp.StatusCode != 200 || json.Unmarshal(b, &count) != nil || count.InputTokens == nil || *count.InputTokens < 20 {
				t.Fatalf("count_tokens: %d %s", resp.StatusCode, b)
			}
			resp, b = h.post("/v1/messages", `{"max_tokens":2,`+fields+"}")
			if resp.StatusCode != 200 {
				t.Fatalf("messages: %d %s", resp.StatusCode, b)
			}
			input, cacheRead, _ := messagesUsage(t, b)
			if *count.InputTokens != input+cacheRead {
				t.Errorf("count_tokens said %d, the engine counted %d (%d + %d cached)", *count.InputTokens, input+cacheRead, input, cacheRead)
			}
			h.expectAccessLine(func(l map[string]any) bool {
				return l["status"] == 200.0 && l["endpoint"] == "messages" && l["outcome"] == "success" && l["producer"] == nil && l["consumer"] == nil
			})
		})
	}
}

// expectAccessLine waits for an access-log line match accepts.
func (h *harness) expectAccessLine(match func(map[string]any) bool) {
	h.t.Helper()
	var lines []map[string]any
	eventually(h.t, 3*time.Second, func() bool {
		lines = h.accessLines()
		for _, l := range lines {
			if match(l) {
				return true
			}
		}
		return false
	}, func() string { b, _ := json.Marshal(lines); return "no such access-log line among " + string(b) })
}
