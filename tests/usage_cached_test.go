package tests

import (
	"fmt"
	"strings"
	"testing"

	"github.com/narwhal-router/narwhal/bench/sim"
	"github.com/narwhal-router/narwhal/bench/sim/tokenizer"
	"github.com/narwhal-router/narwhal/config"
)

// TestCachedTokensAreTheProducersOnEveryEndpoint: through the prefill/decode path the
// consumer reports the transferred prompt as cached (all but its last token), but the client
// must see what no engine computed for it — the producer's own prefix-cache hits: 0 for a
// fresh prompt, and the producer's hits when the same prompt comes again. Every endpoint's
// usage shape, streaming and not: completions' and chat's
// usage.prompt_tokens_details.cached_tokens, and the Responses API's
// usage.input_tokens_details.cached_tokens (in response.completed when streaming).
func TestCachedTokensAreTheProducersOnEveryEndpoint(t *testing.T) {
	eng := sim.Options{Tokens: 2, MaxNumSeqs: 8, PromptTokensDetails: true}
	// 400 words, 400 tokens for completions: 24 full blocks of 16 reusable, (400 − 1) / 16.
	const promptWords, reusable = 400, 384
	cases := []struct {
		name, path string
		body       func(prompt string, stream bool) string
	}{
		{"completions", "/v1/completions", func(p string, stream bool) string {
			return fmt.Sprintf(`{"model":"sim-model","prompt":%s,"max_tokens":2,"stream":%t%s}`, jsonString(p), stream, usageOption(stream))
		}},
		{"chat", "/v1/chat/completions", func(p string, stream bool) string {
			return fmt.Sprintf(`{"model":"sim-model","messages":[{"role":"user","content":%s}],"max_tokens":2,"stream":%t%s}`,
				jsonString(p), stream, usageOption(stream))
		}},
		{"responses", "/v1/responses", func(p string, stream bool) string {
			return fmt.Sprintf(`{"model":"sim-model","input":%s,"max_output_tokens":2,"stream":%t}`, jsonString(p), stream)
		}},
	}
	for _, c := range cases {
		for _, stream := range []bool{false, true} {
			t.Run(fmt.Sprintf("%s/stream=%v", c.name, stream), func(t *testing.T) {
				h := start(t, setup{prefill: 1, decode: 1, engine: eng, config: policy(config.DisaggAlways, 100)})
				prompt := words(c.name[:1], promptWords)
				first := h.send(c.path, c.body(prompt, stream))
				if first.status != 200 {
					t.Fatalf("status %d: %s", first.status, first.body)
				}
				if got := cachedTokens(t, first.body); got != 0 {
					t.Fatalf("a fresh prompt reports cached_tokens %d, want 0 (the producer computed it; the consumer's %d "+
						"are the transferred prompt): %s", got, promptWords-1, tail(first.body))
				}
				again := h.send(c.path, c.body(prompt, stream))
				want := reusable
				if c.name != "completions" { // chat and Responses prompts are rendered with the chat template
					n := tokenizer.Default().Count(tokenizer.ChatML([]tokenizer.Message{{Role: "user", Content: prompt}}, true))
					want = (n - 1) / 16 * 16
				}
				if got := cachedTokens(t, again.body); got != want {
					t.Fatalf("the repeat reports cached_tokens %d, want %d (the producer's prefix hits): %s", got, want, tail(again.body))
				}
				if st := h.simEngine("d0").Stats(); st.KVLoads != 2 {
					t.Fatalf("%d KV loads, want 2: the requests did not take the prefill/decode path", st.KVLoads)
				}
			})
		}
	}
}

func usageOption(stream bool) string {
	if stream {
		return `,"stream_options":{"include_usage":true}`
	}
	return ""
}

// tail is the end of a body, where its usage is, for a failure message.
func tail(b []byte) string {
	s := string(b)
	if len(s) > 600 {
		s = "…" + s[len(s)-600:]
	}
	return strings.TrimSpace(s)
}
