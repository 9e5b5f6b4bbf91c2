package sim

import (
	"fmt"
	"strings"
	"testing"

	json "github.com/goccy/go-json"
)

// choicesBody decodes a non-streaming body's choices and usage.
type choicesBody struct {
	Choices []struct {
		Index   int    `json:"index"`
		Text    string `json:"text"`
		Message struct {
			Content string `json:"content"`
		} `json:"message"`
		FinishReason string `json:"finish_reason"`
	} `json:"choices"`
	Usage struct {
		PromptTokens     int `json:"prompt_tokens"`
		CompletionTokens int `json:"completion_tokens"`
		TotalTokens      int `json:"total_tokens"`
	} `json:"usage"`
}

// n > 1 is served like vLLM serves it, on either role and with the capacity model on or
// off: n choices with indexes 0…n−1, each its own text, and usage counting every choice's
// tokens; streaming sends one chunk per choice and token (chat: a role delta per choice
// first), then one usage chunk.
func TestSeveralChoices(t *testing.T) {
	for _, o := range []Options{{Role: RoleDecode, Tokens: 3}, {Role: RolePrefill, Tokens: 3, MaxNumSeqs: 4}} {
		e := startEngine(t, o)
		name := fmt.Sprintf("role=%s capacity=%v", o.Role, o.MaxNumSeqs > 0)
		for _, api := range []struct{ path, body string }{
			{"/v1/completions", `{"prompt":"one two three","n":3%s}`},
			{"/v1/chat/completions", `{"messages":[{"role":"user","content":"one two three"}],"n":3%s}`},
		} {
			t.Run(name+api.path, func(t *testing.T) {
				status, _, body := post(t, e.URL(), api.path, fmt.Sprintf(api.body, ""))
				if status != 200 {
					t.Fatalf("%d %s", status, body)
				}
				var b choicesBody
				if err := json.Unmarshal(body, &b); err != nil {
					t.Fatal(err)
				}
				if len(b.Choices) != 3 {
					t.Fatalf("%d choices: %s", len(b.Choices), body)
				}
				texts := map[string]bool{}
				for i, c := range b.Choices {
					text := c.Text + c.Message.Content
					if c.Index != i || c.FinishReason != "stop" || len(strings.Fields(text)) != 3 {
						t.Errorf("choice %d: %+v", i, c)
					}
					texts[text] = true
				}
				if len(texts) != 3 {
					t.Errorf("the choices are not distinct: %s", body)
				}
				if want := b.Choices[0].Text + b.Choices[0].Message.Content; want != TokenText(0)+TokenText(1)+TokenText(2) {
					t.Errorf("choice 0 is %q, want the n=1 output", want)
				}
				if b.Usage.CompletionTokens != 9 || b.Usage.TotalTokens != b.Usage.PromptTokens+9 {
					t.Errorf("usage %+v, want 9 completion tokens (3 choices × 3)", b.Usage)
				}

				// Streaming: every chunk names its choice; each choice gets its 3 tokens, in
				// order, and the same text as the body above.
				status, _, sse := post(t, e.URL(), api.path, fmt.Sprintf(api.body, `,"stream":true,"stream_options":{"include_usage":true}`))
				if status != 200 {
					t.Fatalf("%d %s", status, sse)
				}
				streamed := map[int]string{}
				roles, usage := map[int]int{}, 0
				for _, data := range sseData(t, sse) {
					if data == "[DONE]" {
						continue
					}
					var ch struct {
						Choices []struct {
							Index int    `json:"index"`
							Text  string `json:"text"`
							Delta struct {
								Role    string `json:"role"`
								Content string `json:"content"`
							} `json:"delta"`
						} `json:"choices"`
						Usage *struct {
							CompletionTokens int `json:"completion_tokens"`
						} `json:"usage"`
					}
					if err := json.Unmarshal([]byte(data), &ch); err != nil {
						t.Fatalf("%s: %v", data, err)
					}
					if ch.Usage != nil {
						usage = ch.Usage.CompletionTokens
					}
					if len(ch.Choices) > 1 {
						t.Fatalf("a chunk with %d choices: %s", len(ch.Choices), data)
					}
					for _, c := range ch.Choices {
						if c.Delta.Role != "" {
							roles[c.Index]++
						}
						streamed[c.Index] += c.Text + c.Delta.Content
					}
				}
				for i, c := range b.Choices {
					if streamed[i] != c.Text+c.Message.Content {
						t.Errorf("choice %d streamed %q, the body says %q", i, streamed[i], c.Text+c.Message.Content)
					}
					if api.path == "/v1/chat/completions" && roles[i] != 1 {
						t.Errorf("choice %d had %d role deltas, want 1", i, roles[i])
					}
				}
				if usage != 9 {
					t.Errorf("stream usage says %d completion tokens, want 9", usage)
				}
			})
		}
	}
}
