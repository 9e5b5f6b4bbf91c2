package wire

import (
	"crypto/rand"
	"encoding/hex"

	"github.com/goccy/go-json"
)

// The Messages API's answers: the message of a non-streaming request (from the assembled chat
// completion, as vLLM's messages_full_converter builds it in
// vllm/entrypoints/anthropic/serving.py), the usage and stop reason both shapes share, and
// Anthropic's error shape.

type messagesOut struct {
	ID           string          `json:"id"`
	Type         string          `json:"type"`
	Role         string          `json:"role"`
	Content      []messagesBlock `json:"content"`
	Model        string          `json:"model"`
	StopReason   *string         `json:"stop_reason"`
	StopSequence json.RawMessage `json:"stop_sequence"`
	Usage        messagesUsage   `json:"usage"`
}

type messagesBlock struct {
	Type      string          `json:"type"`
	Text      *string         `json:"text,omitempty"`
	Thinking  *string         `json:"thinking,omitempty"`
	Signature string          `json:"signature,omitempty"`
	ID        string          `json:"id,omitempty"`
	Name      string          `json:"name,omitempty"`
	Input     json.RawMessage `json:"input,omitempty"`
}

// messagesUsage is Anthropic's usage: input_tokens counts the prompt tokens that were not read
// from the prefix cache, cache_read_input_tokens those that were (the router's corrected
// cached_tokens), so that their sum is the prompt, as Anthropic counts them.
type messagesUsage struct {
	InputTokens          int `json:"input_tokens"`
	OutputTokens         int `json:"output_tokens"`
	CacheReadInputTokens int `json:"cache_read_input_tokens"`
}

// usageOf maps token counts (-1: not reported) to Anthropic's usage.
func usageOf(t Tokens) messagesUsage {
	cached := max(t.Cached, 0)
	return messagesUsage{InputTokens: max(t.Prompt-cached, 0), OutputTokens: max(t.Completion, 0), CacheReadInputTokens: cached}
}

// stopReason maps a chat finish reason (and vLLM's stop_reason: the stop string matched, if any)
// to Anthropic's stop_reason and stop_sequence, as vLLM's stop_reason_map does; a stop on one of
// the client's stop_sequences is reported as Anthropic reports it.
func stopReason(finish string, stop json.RawMessage) (reason string, sequence json.RawMessage) {
	switch finish {
	case "length":
		return "max_tokens", jsonNull
	case "tool_calls":
		return "tool_use", jsonNull
	}
	if isString(stop) {
		return "stop_sequence", stop
	}
	return "end_turn", jsonNull
}

// messagesAnswer is the Messages response of an assembled chat completion (its first choice: the
// Messages API has no n).
func messagesAnswer(out *chatOut) ([]byte, error) {
	m := messagesOut{ID: out.ID, Type: "message", Role: "assistant", Model: out.Model, Content: []messagesBlock{}, StopSequence: jsonNull}
	if t, ok := UsageTokens(out.Usage); ok {
		m.Usage = usageOf(t)
	}
	if len(out.Choices) == 0 {
		return nil, errNoChoice{}
	}
	ch := out.Choices[0]
	if ch.FinishReason != nil {
		r, seq := stopReason(*ch.FinishReason, ch.StopReason)
		m.StopReason, m.StopSequence = &r, seq
	}
	msg := ch.Message
	reasoning := msg.Reasoning
	if reasoning == nil {
		reasoning = msg.ReasoningContent
	}
	if reasoning != nil && *reasoning != "" {
		m.Content = append(m.Content, messagesBlock{Type: "thinking", Thinking: reasoning, Signature: newSignature()})
	}
	if msg.Content != nil && *msg.Content != "" {
		m.Content = append(m.Content, messagesBlock{Type: "text", Text: msg.Content})
	}
	for _, c := range msg.ToolCalls {
		input := json.RawMessage(c.Function.Arguments)
		if len(input) == 0 {
			input = json.RawMessage("{}")
		}
		if !json.Valid(input) || input[SkipSpace(input, 0)] != '{' {
			return nil, errToolInput{name: c.Function.Name}
		}
		m.Content = append(m.Content, messagesBlock{Type: "tool_use", ID: c.ID, Name: c.Function.Name, Input: input})
	}
	return json.Marshal(m)
}

// newSignature stands in for a thinking block's signature, which the engines do not make (vLLM
// sends a random one too); clients echo it back and the router ignores it.
func newSignature() string {
	var b [16]byte
	_, _ = rand.Read(b[:])
	return hex.EncodeToString(b[:])
}

type errNoChoice struct{}

func (errNoChoice) Error() string { return "the stream carried no choice" }

type errToolInput struct{ name string }

func (e errToolInput) Error() string {
	return "the engine's arguments for tool " + e.name + " are not a JSON object"
}

// messagesErrorType is Anthropic's error type for an HTTP status.
func messagesErrorType(status int) string {
	switch status {
	case 400, 405, 408, 422, 431:
		return "invalid_request_error"
	case 401:
		return "authentication_error"
	case 403:
		return "permission_error"
	case 404:
		return "not_found_error"
	case 413:
		return "request_too_large"
	case 429:
		return "rate_limit_error"
	case 503, 529:
		return "overloaded_error"
	case 504:
		return "timeout_error"
	}
	if status >= 400 && status < 500 {
		return "invalid_request_error"
	}
	return "api_error"
}

// appendMessagesError appends Anthropic's error body: {"type":"error","error":{"type","message"}}.
func appendMessagesError(dst []byte, status int, message string) []byte {
	b, _ := json.Marshal(struct {
		Type  string `json:"type"`
		Error struct {
			Type    string `json:"type"`
			Message string `json:"message"`
		} `json:"error"`
	}{Type: "error", Error: struct {
		Type    string `json:"type"`
		Message string `json:"message"`
	}{messagesErrorType(status), message}})
	return append(dst, b...)
}

// MessagesErrorBody rewrites an OpenAI error body (the router's or an engine's envelope) with
// status into Anthropic's shape, keeping its message.
func MessagesErrorBody(status int, openAI []byte) []byte {
	msg := ParseStreamError(openAI).Message
	return appendMessagesError(nil, status, msg)
}

// AppendMessagesErrorEvent appends the event that ends a Messages stream that failed after its
// first token: Anthropic's "error" event, from the OpenAI error event (or data) the stream would
// have ended with, whose code, when it is an HTTP status, types it.
func AppendMessagesErrorEvent(dst []byte, status int, openAIEvent []byte) []byte {
	data := openAIEvent
	if d := EventData(openAIEvent); d != nil {
		data = d
	}
	se := ParseStreamError(data)
	if se.Status != 500 {
		status = se.Status
	}
	dst = append(dst, "event: error\ndata: "...)
	dst = appendMessagesError(dst, status, se.Message)
	return append(dst, "\n\n"...)
}
