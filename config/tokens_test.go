package config

import (
	"strings"
	"testing"
)

// placement.tokens' bounds, each refused with its key, and a model's entry over the default.
func TestTokensSectionBoundsAndInheritance(t *testing.T) {
	for _, tc := range []struct{ name, yaml, want string }{
		{"unknown source", "placement:\n  tokens:\n    default: {source: words}\n", "placement.tokens.default.source"},
		{"no timeout", "placement:\n  tokens:\n    render_timeout_s: 0\n", "placement.tokens.render_timeout_s"},
		{"a timeout past 5 s", "placement:\n  tokens:\n    render_timeout_s: 6\n", "placement.tokens.render_timeout_s"},
		{"block size 0", "placement:\n  tokens:\n    default: {block_size: 0}\n", "placement.tokens.default.block_size"},
		{"local without its file", "placement:\n  tokens:\n    default: {source: local}\n", "placement.tokens.default.tokenizer_json"},
		{"an unknown template", "placement:\n  tokens:\n    default: {chat_template: llama3}\n", "placement.tokens.default.chat_template"},
		{"a render URL without a scheme", "placement:\n  tokens:\n    default: {render_url: render:8000}\n", "placement.tokens.default.render_url"},
		{"an unknown render API", "placement:\n  tokens:\n    default: {render_api: detokenize}\n", "placement.tokens.default.render_api"},
		{"a model twice", "placement:\n  tokens:\n    models: [{name: m}, {name: m}]\n", "placement.tokens.models[1].name"},
		{"a model's bad source", "placement:\n  tokens:\n    models: [{name: m, tokens: {source: local}}]\n", "placement.tokens.models[0].tokens.tokenizer_json"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := Parse([]byte(tc.yaml+minimal), noEnv)
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("error %v, want one naming %s", err, tc.want)
			}
		})
	}
	c, err := Parse([]byte("placement:\n  tokens:\n    default: {source: render, render_url: \"http://render:8000\"}\n"+
		"    models: [{name: lora, adapter: true, tokens: {block_size: 32}}]\n"+minimal), noEnv)
	if err != nil {
		t.Fatal(err)
	}
	src, adapter := c.Placement.Tokens.For("lora")
	if !adapter || src.Source != TokensRender || src.RenderURL != "http://render:8000" || src.BlockSize != 32 || src.RenderAPI != RenderAPIRender {
		t.Fatalf("the adapter's source %+v (adapter %v): want the default's with its own block size", src, adapter)
	}
	if src, adapter := c.Placement.Tokens.For("base"); adapter || src.BlockSize != 16 {
		t.Fatalf("an unlisted model: %+v (adapter %v), want the default", src, adapter)
	}
}
