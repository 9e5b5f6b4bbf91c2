// Package tokenize owns a prompt's token ids for placement: from placement.tokens' source per
// model — a local byte-level BPE read from the model's tokenizer.json (bpe.go), a render call
// to a vLLM (render.go), or none (the estimate, wire.Prompt's word blocks) — it computes the
// keys of the prompt's full blocks of tokens (transport/blockkey), the keys the exact prefix
// index holds the engines' KV events under. A render is bounded: one call per request at most
// (the caller asks once), within render_timeout_s; any failure places the request on the
// estimate, counted by reason.
package tokenize

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"os"
	"strings"
	"time"

	"github.com/narwhal-router/narwhal/config"
	"github.com/narwhal-router/narwhal/transport/blockkey"
	"github.com/narwhal-router/narwhal/transport/telemetry"
	"github.com/narwhal-router/narwhal/transport/wire"
)

// Tokenizer gives prompts their token blocks under one placement.tokens section.
type Tokenizer struct {
	cfg   config.Tokens
	local map[string]*BPE // by tokenizer_json
	hc    *http.Client
	m     *telemetry.Metrics
}

// New loads every tokenizer.json a local source names.
func New(cfg config.Tokens, m *telemetry.Metrics) (*Tokenizer, error) {
	t := &Tokenizer{cfg: cfg, local: map[string]*BPE{}, m: m,
		hc: &http.Client{Transport: &http.Transport{MaxIdleConnsPerHost: 64, IdleConnTimeout: 90 * time.Second}}}
	sources := []config.TokenSource{cfg.Default}
	for _, mt := range cfg.Models {
		src, _ := cfg.For(mt.Name)
		sources = append(sources, src)
	}
	for _, src := range sources {
		if src.Source != config.TokensLocal || t.local[src.TokenizerJSON] != nil {
			continue
		}
		raw, err := os.ReadFile(src.TokenizerJSON)
		if err != nil {
			return nil, fmt.Errorf("placement.tokens: %w", err)
		}
		bpe, err := Load(raw)
		if err != nil {
			return nil, fmt.Errorf("placement.tokens: %s: %w", src.TokenizerJSON, err)
		}
		t.local[src.TokenizerJSON] = bpe
	}
	return t, nil
}

// Close drops the render connections.
func (t *Tokenizer) Close() { t.hc.CloseIdleConnections() }

// Blocks are a prompt's token blocks.
type Blocks struct {
	// Keys are the keys of the prompt's full blocks, chained from the first.
	Keys []uint64
	// Tokens is the prompt's token count; BlockSize the tokens each key covers.
	Tokens, BlockSize int
}

// Prompt returns body's token blocks from its model's source; ok false places it on the
// estimate (the source is estimate, or it failed: counted by reason). engine names the base
// URL of one of the model's engines, for a render without render_url ("" when none).
func (t *Tokenizer) Prompt(ctx context.Context, body *wire.ClientBody, engine func() string) (b Blocks, ok bool) {
	return t.PromptOf(ctx, body, "", engine)
}

// PromptOf is Prompt for a model the fleet lists as a LoRA adapter of parent ("" for none): one
// that placement.tokens.models does not name is tokenized with its base model's source, and its
// name enters every block's key, as vLLM hashes it, so its blocks never match the base model's.
func (t *Tokenizer) PromptOf(ctx context.Context, body *wire.ClientBody, parent string, engine func() string) (b Blocks, ok bool) {
	if t == nil {
		return Blocks{}, false
	}
	src, adapter := t.cfg.For(body.Model)
	if parent != "" && !t.configured(body.Model) {
		src, _ = t.cfg.For(parent)
		adapter = true
	}
	if src.Source == config.TokensEstimate {
		return Blocks{}, false
	}
	ids, rerr := t.timedTokens(ctx, src, body, engine)
	if rerr != nil {
		return Blocks{}, false
	}
	x := blockkey.Extra{Salt: stringMember(body, "cache_salt")}
	if adapter {
		x.Adapter = body.Model
	}
	return Blocks{Keys: blockkey.Keys(nil, ids, src.BlockSize, x), Tokens: len(ids), BlockSize: src.BlockSize}, true
}

// ErrNoTokenizer is Count's answer for a model whose placement.tokens source is the estimate:
// the router has no tokenizer for it, only a word count, and a word count is not a token count.
var ErrNoTokenizer = errors.New("no tokenizer source (placement.tokens: local or render) is configured for this model")

// Count is the number of tokens body's prompt comes to on its model's engines, from the
// model's source, as Prompt computes them (a chat through the chat template the engines apply).
// It is the count a client asks for ahead of a request (the Messages API's count_tokens), so a
// failure is the caller's to report, not a fallback: ErrNoTokenizer without a source, else the
// source's error (a render that failed or timed out), counted like Prompt's.
func (t *Tokenizer) Count(ctx context.Context, body *wire.ClientBody, engine func() string) (int, error) {
	if t == nil {
		return 0, ErrNoTokenizer
	}
	src, _ := t.cfg.For(body.Model)
	if src.Source == config.TokensEstimate {
		return 0, ErrNoTokenizer
	}
	ids, rerr := t.timedTokens(ctx, src, body, engine)
	if rerr != nil {
		return 0, fmt.Errorf("tokenizing a %q prompt (source %s): %w", body.Model, src.Source, rerr)
	}
	return len(ids), nil
}

// timedTokens is tokens, its time and result counted (narwhal_prompt_tokenization_seconds).
func (t *Tokenizer) timedTokens(ctx context.Context, src config.TokenSource, body *wire.ClientBody, engine func() string) ([]uint32, *renderError) {
	start := time.Now()
	ids, rerr := t.tokens(ctx, src, body, engine)
	result := "ok"
	if rerr != nil {
		result = rerr.reason
	}
	t.m.PromptTokens(body.Model, src.Source, result, time.Since(start))
	return ids, rerr
}

// configured says whether placement.tokens.models names model.
func (t *Tokenizer) configured(model string) bool {
	for _, m := range t.cfg.Models {
		if m.Name == model {
			return true
		}
	}
	return false
}

// tokens are body's token ids from src: a token-id prompt's own, else the source's.
func (t *Tokenizer) tokens(ctx context.Context, src config.TokenSource, body *wire.ClientBody, engine func() string) ([]uint32, *renderError) {
	if ids, ok := promptIDs(body); ok {
		return ids, nil
	}
	if src.Source == config.TokensLocal {
		return t.encodeLocal(t.local[src.TokenizerJSON], src.ChatTemplate, body)
	}
	base := src.RenderURL
	if base == "" {
		if base = engine(); base == "" {
			return nil, fail("no_engine", "no engine of %q to render on", body.Model)
		}
	}
	ctx, cancel := context.WithTimeout(ctx, t.cfg.RenderTimeoutS.Duration())
	defer cancel()
	return t.render(ctx, base, src.RenderAPI, body)
}

// promptIDs are a completions prompt given as token ids (the first of several).
func promptIDs(body *wire.ClientBody) ([]uint32, bool) {
	if body.Endpoint.EngineShape() != wire.EndpointCompletions {
		return nil, false
	}
	v, ok := body.Lookup("prompt")
	if !ok || len(v) < 2 || v[0] != '[' {
		return nil, false
	}
	var ids []uint32
	if json.Unmarshal(v, &ids) == nil && len(ids) > 0 {
		return ids, true
	}
	var lists [][]uint32
	if json.Unmarshal(v, &lists) == nil && len(lists) > 0 && len(lists[0]) > 0 {
		return lists[0], true
	}
	return nil, false
}

// encodeLocal tokenizes body with bpe: a completions prompt (the first of several strings) as
// vLLM does, with the tokenizer's leading special tokens; chat messages through the chat
// template, when one is configured.
func (t *Tokenizer) encodeLocal(bpe *BPE, template string, body *wire.ClientBody) ([]uint32, *renderError) {
	switch body.Endpoint.EngineShape() {
	case wire.EndpointCompletions:
		v, _ := body.Lookup("prompt")
		var s string
		if json.Unmarshal(v, &s) != nil {
			var list []string
			if json.Unmarshal(v, &list) != nil || len(list) == 0 {
				return nil, fail("unsupported", "a prompt that is neither text nor token ids")
			}
			s = list[0]
		}
		return bpe.Encode(s, true), nil
	case wire.EndpointChat:
		if template != config.ChatTemplateML {
			return nil, fail("unsupported", "no chat_template for local chat prompts")
		}
		v, _ := body.Lookup("messages")
		text, err := chatML(v)
		if err != nil {
			return nil, &renderError{"unsupported", err}
		}
		return bpe.Encode(text, false), nil
	}
	return nil, fail("unsupported", "no local tokenization for %s", body.Endpoint.EngineShape().Path())
}

// chatML renders messages with the ChatML template (as Qwen2/Qwen3 and many others ship it in
// tokenizer_config.json's chat_template, tools aside): "<|im_start|>{role}\n{content}
// <|im_end|>\n" per message, then "<|im_start|>assistant\n" — vLLM's add_generation_prompt,
// on by default. A content of parts is its text parts joined by newlines; any other part
// (an image) is refused: its tokens are the engine's to know.
func chatML(raw []byte) (string, error) {
	var msgs []struct {
		Role    string          `json:"role"`
		Content json.RawMessage `json:"content"`
	}
	if err := json.Unmarshal(raw, &msgs); err != nil {
		return "", fmt.Errorf("messages: %w", err)
	}
	var b strings.Builder
	for _, m := range msgs {
		var content string
		if json.Unmarshal(m.Content, &content) != nil {
			var parts []struct {
				Type string `json:"type"`
				Text string `json:"text"`
			}
			if err := json.Unmarshal(m.Content, &parts); err != nil {
				return "", fmt.Errorf("message content: %w", err)
			}
			texts := make([]string, 0, len(parts))
			for _, p := range parts {
				if p.Type != "text" {
					return "", fmt.Errorf("a %q part", p.Type)
				}
				texts = append(texts, p.Text)
			}
			content = strings.Join(texts, "\n")
		}
		b.WriteString("<|im_start|>" + m.Role + "\n" + content + "<|im_end|>\n")
	}
	b.WriteString("<|im_start|>assistant\n")
	return b.String(), nil
}

// stringMember is body's top-level string member key, "" when absent or not a string.
func stringMember(body *wire.ClientBody, key string) string {
	v, ok := body.Lookup(key)
	var s string
	if ok && json.Unmarshal(v, &s) == nil {
		return s
	}
	return ""
}
