package sim

import (
	"fmt"
	"net/http"
	"os"

	json "github.com/goccy/go-json"

	"github.com/narwhal-router/narwhal/bench/sim/blockhash"
	"github.com/narwhal-router/narwhal/bench/sim/tokenizer"
)

// A prompt is token ids, as in vLLM: a completions string goes through the tokenizer
// (bench/sim/tokenizer, a byte-level BPE read from a tokenizer.json), a token-id prompt is
// used as it is, and chat messages (and a Responses request's instructions and input) are
// rendered with the ChatML template first. The ids are the prompt's tokens for usage,
// context-length checks and KV blocks; with the capacity model they are cut into blocks of
// BlockSize and hashed as vLLM's prefix cache hashes them (bench/sim/blockhash: chained
// hash_fn((parent, tokens, extra_keys)) with a per-process random NONE_HASH unless a hash
// seed is given), and KV events carry them.

// loadTokenizer returns the tokenizer of o: the file TokenizerJSON names, else the
// embedded one.
func loadTokenizer(o Options) (*tokenizer.Tokenizer, error) {
	if o.TokenizerJSON == "" {
		return tokenizer.Default(), nil
	}
	b, err := os.ReadFile(o.TokenizerJSON)
	if err != nil {
		return nil, fmt.Errorf("tokenizer: %w", err)
	}
	return tokenizer.Load(b)
}

// extraKeys are a request's extra block-hash keys (vLLM's generate_block_hash_extra_keys):
// the LoRA adapter's name on every block, then the cache salt on the first block only.
type extraKeys struct {
	lora   string // "" for the base model
	loraID int    // vLLM's lora_int_id, 1-based in --lora-modules order
	salt   string
}

// block returns block i's extra keys, nil when it has none (None in vLLM).
func (k extraKeys) block(i int) []string {
	var out []string
	if k.lora != "" {
		out = append(out, k.lora)
	}
	if i == 0 && k.salt != "" {
		out = append(out, k.salt)
	}
	return out
}

// blockHashes returns the hashes of ids' full blocks as KV events carry them.
func blockHashes(h *blockhash.Hasher, ids []uint32, size int, keys extraKeys) []uint64 {
	out := make([]uint64, 0, len(ids)/size)
	var parent []byte
	for i := 0; (i+1)*size <= len(ids); i++ {
		var extra blockhash.Tuple
		for _, k := range keys.block(i) {
			extra = append(extra, k)
		}
		parent = h.Block(parent, ids[i*size:(i+1)*size], extra)
		out = append(out, blockhash.External(parent))
	}
	return out
}

// fixedSeed is the PYTHONHASHSEED of BlockHashes.
var fixedSeed = "0"

// BlockHashes returns the block hashes a completions prompt of text gets from an engine
// started with the default hash algorithm (sha256) and hash seed "0". Engines without a seed
// draw their own, so only the sharing between prompts carries over to them.
func BlockHashes(text string, blockSize int) []uint64 {
	h, err := blockhash.New(blockhash.SHA256, &fixedSeed)
	if err != nil {
		panic(err) // never: the algorithm is known
	}
	return blockHashes(h, tokenizer.Default().Encode(text), blockSize, extraKeys{})
}

// PromptTokens is the number of tokens of a completions prompt of text (at least 1), as
// usage.prompt_tokens reports it.
func PromptTokens(text string) int { return max(tokenizer.Default().Count(text), 1) }

// parsePrompt returns the prompt's token ids and the text directives live in. A prompt is
// a string, a list of one string, a list of token ids or a list of one such list.
func parsePrompt(tok *tokenizer.Tokenizer, raw json.RawMessage) ([]uint32, string, *apiError) {
	missing := invalidRequest("prompt", "Either prompt or prompt_embeds must be provided and non-empty.")
	if len(raw) == 0 || string(raw) == "null" {
		return nil, "", missing
	}
	var v any
	if err := json.Unmarshal(raw, &v); err != nil {
		return nil, "", invalidRequest("prompt", "invalid prompt: "+err.Error())
	}
	if p, ok := v.([]any); ok && len(p) == 1 {
		if _, isID := p[0].(float64); !isID {
			v = p[0] // a list of one string or of one token-id list
		}
	}
	switch p := v.(type) {
	case string:
		if p == "" {
			return nil, "", missing
		}
		return tok.Encode(p), p, nil
	case []any:
		if len(p) == 0 {
			return nil, "", missing
		}
		if _, isID := p[0].(float64); !isID {
			return nil, "", newError(http.StatusBadRequest, "prompt",
				fmt.Sprintf("The simulator supports one prompt per request, got %d.", len(p)))
		}
		ids := make([]uint32, 0, len(p))
		for _, x := range p {
			f, ok := x.(float64)
			if !ok || f < 0 || f > 1<<32-1 || f != float64(uint32(f)) {
				return nil, "", invalidRequest("prompt", "token ids must be non-negative integers")
			}
			ids = append(ids, uint32(f))
		}
		return ids, "", nil
	}
	return nil, "", invalidRequest("prompt", "prompt must be a string, a list of strings or a list of token ids")
}

// parseMessages renders the messages with the chat template and returns their token ids
// and the last message's text, where directives live.
func parseMessages(tok *tokenizer.Tokenizer, raw json.RawMessage) ([]uint32, string, *apiError) {
	msgs, err := chatMessages(raw)
	if err != nil {
		return nil, "", err
	}
	return tok.Encode(tokenizer.ChatML(msgs, true)), msgs[len(msgs)-1].Content, nil
}

// chatMessages reads a chat request's messages: a role each and the text of their content.
func chatMessages(raw json.RawMessage) ([]tokenizer.Message, *apiError) {
	if len(raw) == 0 || string(raw) == "null" {
		return nil, invalidRequest("messages", "Field required: messages")
	}
	var msgs []wireMessage
	if err := json.Unmarshal(raw, &msgs); err != nil {
		return nil, invalidRequest("messages", "messages must be a list of message objects: "+err.Error())
	}
	if len(msgs) == 0 {
		return nil, invalidRequest("messages", "messages must not be empty")
	}
	out := make([]tokenizer.Message, len(msgs))
	for i, m := range msgs {
		if m.Role == nil {
			return nil, invalidRequest("messages", fmt.Sprintf("messages[%d].role: Field required", i))
		}
		text, err := messageText(m.Content)
		if err != nil {
			return nil, invalidRequest("messages", fmt.Sprintf("messages[%d].content: %v", i, err))
		}
		out[i] = tokenizer.Message{Role: *m.Role, Content: text}
	}
	return out, nil
}

// parseInput renders a Responses request as chat messages — the instructions as the
// system message, every input item as a user message — and returns their token ids and the
// last item's text, where directives live.
func parseInput(tok *tokenizer.Tokenizer, raw, instructions json.RawMessage) ([]uint32, string, *apiError) {
	texts, err := responsesTexts(raw, instructions)
	if err != nil {
		return nil, "", err
	}
	msgs := make([]tokenizer.Message, len(texts))
	for i, t := range texts {
		msgs[i] = tokenizer.Message{Role: "user", Content: t}
	}
	if len(instructions) > 0 && string(instructions) != "null" {
		msgs[0].Role = "system"
	}
	return tok.Encode(tokenizer.ChatML(msgs, true)), texts[len(texts)-1], nil
}
