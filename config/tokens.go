package config

import (
	"fmt"
	"net/url"
)

// Tokens is placement.tokens: where the router gets a prompt's token ids, so that prompts are
// matched against the engines' KV cache events by the blocks of tokens the engines cache, not
// by words. transport/tokenize reads it; docs/configuration.md says what each source costs.
type Tokens struct {
	// Default is the source of every model not listed in Models.
	Default TokenSource `yaml:"default"`
	// RenderTimeoutS bounds one render call; past it the request is placed on the estimate.
	RenderTimeoutS Seconds `yaml:"render_timeout_s"`
	// Models are per-model sources; a field left empty (0) takes the default's.
	Models []ModelTokens `yaml:"models"`
}

// TokenSource is where one model's token ids come from.
type TokenSource struct {
	// Source is local, render or estimate.
	Source string `yaml:"source"`
	// BlockSize is the engines' KV block in tokens (vLLM's --block-size).
	BlockSize int `yaml:"block_size"`
	// TokenizerJSON is the model's Hugging Face tokenizer.json (source local).
	TokenizerJSON string `yaml:"tokenizer_json"`
	// ChatTemplate is how source local renders chat messages: chatml, or "" (chat requests
	// are placed on the estimate).
	ChatTemplate string `yaml:"chat_template"`
	// RenderURL is a render service's base URL (vLLM's `vllm launch render`, or any vLLM
	// serving the model); "" asks one of the model's engines.
	RenderURL string `yaml:"render_url"`
	// RenderAPI is render (POST /v1/completions/render, /v1/chat/completions/render) or
	// tokenize (POST /tokenize).
	RenderAPI string `yaml:"render_api"`
}

// ModelTokens is one model's entry of placement.tokens.models.
type ModelTokens struct {
	Name string `yaml:"name"`
	// Tokens is the model's source; a field left empty (0) takes the default's.
	Tokens TokenSource `yaml:"tokens"`
	// Adapter says the model name is a LoRA adapter's: vLLM hashes the adapter's name into
	// every block of its prompts, so they never match the base model's.
	Adapter bool `yaml:"adapter"`
}

// Token sources and render APIs.
const (
	TokensLocal     = "local"
	TokensRender    = "render"
	TokensEstimate  = "estimate"
	RenderAPIRender = "render"
	RenderAPITokens = "tokenize"
	ChatTemplateML  = "chatml"
)

// maxRenderTimeout bounds placement.tokens.render_timeout_s: a render is paid inside the
// time to first token of every request it serves.
const maxRenderTimeout = 5

// maxTokenBlock bounds block_size (vLLM's largest block sizes for hybrid models are a few
// thousand tokens).
const maxTokenBlock = 1 << 14

func defaultTokens() Tokens {
	return Tokens{Default: TokenSource{Source: TokensEstimate, BlockSize: 16, RenderAPI: RenderAPIRender},
		RenderTimeoutS: 0.25}
}

// For is the source of model's token ids: its entry of Models over the default, and whether
// the model is a LoRA adapter.
func (t Tokens) For(model string) (TokenSource, bool) {
	for _, m := range t.Models {
		if m.Name == model {
			return m.Tokens.over(t.Default), m.Adapter
		}
	}
	return t.Default, false
}

// over is s with its empty fields taken from d.
func (s TokenSource) over(d TokenSource) TokenSource {
	pick := func(v, def string) string {
		if v == "" {
			return def
		}
		return v
	}
	out := TokenSource{Source: pick(s.Source, d.Source), TokenizerJSON: pick(s.TokenizerJSON, d.TokenizerJSON),
		ChatTemplate: pick(s.ChatTemplate, d.ChatTemplate), RenderURL: pick(s.RenderURL, d.RenderURL),
		RenderAPI: pick(s.RenderAPI, d.RenderAPI), BlockSize: s.BlockSize}
	if out.BlockSize == 0 {
		out.BlockSize = d.BlockSize
	}
	return out
}

func (t Tokens) check(ck *checker) {
	t.Default.check(ck, "placement.tokens.default")
	if !(t.RenderTimeoutS > 0) || t.RenderTimeoutS > maxRenderTimeout {
		ck.fail("placement.tokens.render_timeout_s", "must be more than 0 and at most %d seconds, got %v", maxRenderTimeout, float64(t.RenderTimeoutS))
	}
	seen := map[string]bool{}
	for i, m := range t.Models {
		p := fmt.Sprintf("placement.tokens.models[%d]", i)
		if m.Name == "" || seen[m.Name] {
			ck.fail(p+".name", "must name a model once, got %q", m.Name)
		}
		seen[m.Name] = true
		m.Tokens.over(t.Default).check(ck, p+".tokens")
	}
}

func (s TokenSource) check(ck *checker, p string) {
	ck.oneOf(p+".source", s.Source, TokensEstimate, TokensLocal, TokensRender)
	ck.oneOf(p+".render_api", s.RenderAPI, RenderAPIRender, RenderAPITokens)
	if s.ChatTemplate != "" {
		ck.oneOf(p+".chat_template", s.ChatTemplate, ChatTemplateML)
	}
	if s.BlockSize < 1 || s.BlockSize > maxTokenBlock {
		ck.fail(p+".block_size", "must be the engines' --block-size, 1 to %d tokens, got %d", maxTokenBlock, s.BlockSize)
	}
	if s.Source == TokensLocal && s.TokenizerJSON == "" {
		ck.fail(p+".tokenizer_json", "must name the model's tokenizer.json for source local")
	}
	if s.RenderURL != "" {
		if u, err := url.Parse(s.RenderURL); err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
			ck.fail(p+".render_url", "%q is not an http(s) URL", s.RenderURL)
		}
	}
}
