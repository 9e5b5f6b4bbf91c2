package wire

import (
	"bytes"
	"strings"

	"github.com/goccy/go-json"
)

// Anthropic's Messages API (/v1/messages) on the prefill/decode path.
//
// vLLM serves Messages natively, but its Messages endpoint does not take kv_transfer_params, and
// both legs of a disaggregated request need them. So the router translates the client's Messages
// request into the chat completions request vLLM's own Messages handler builds from it
// (vllm/entrypoints/anthropic/serving.py, _convert_anthropic_to_openai_request), runs both legs
// on the engines' /v1/chat/completions like any chat request, and translates the answer back
// (messagesanswer.go, messagesstream.go). What the chat API cannot carry is refused with a 400
// naming the field, never dropped without a word: docs/messages-api.md has the field table.

// messagesRequest is the Messages request body. Values the translation copies unchanged are kept
// raw, so that a long text is not decoded and re-encoded.
type messagesRequest struct {
	Model         json.RawMessage `json:"model"`
	Messages      json.RawMessage `json:"messages"`
	System        json.RawMessage `json:"system"`
	MaxTokens     json.RawMessage `json:"max_tokens"`
	StopSequences json.RawMessage `json:"stop_sequences"`
	Temperature   json.RawMessage `json:"temperature"`
	TopP          json.RawMessage `json:"top_p"`
	TopK          json.RawMessage `json:"top_k"`
	Stream        json.RawMessage `json:"stream"`
	Metadata      json.RawMessage `json:"metadata"`
	Tools         json.RawMessage `json:"tools"`
	ToolChoice    json.RawMessage `json:"tool_choice"`
	OutputConfig  json.RawMessage `json:"output_config"`
	// ChatTemplateKwargs is vLLM's extension of the Messages API, passed on as it is.
	ChatTemplateKwargs json.RawMessage `json:"chat_template_kwargs"`
}

// messagesKnown are the top-level members the translation reads; any other is refused.
var messagesKnown = map[string]bool{
	"model": true, "messages": true, "system": true, "max_tokens": true, "stop_sequences": true,
	"temperature": true, "top_p": true, "top_k": true, "stream": true, "metadata": true,
	"tools": true, "tool_choice": true, "output_config": true, "chat_template_kwargs": true,
}

// messagesRefused explains, for the Messages members the engines cannot honour, why.
var messagesRefused = map[string]string{
	"thinking":           "extended thinking settings are not supported: the engines' chat API has no thinking budget",
	"service_tier":       "service_tier: the fleet has one tier; only auto and standard_only are honoured",
	"container":          "containers are not supported: the engines run no code tools",
	"mcp_servers":        "MCP servers are not supported: the engines call no remote tools",
	"kv_transfer_params": "kv_transfer_params is set by the router for each leg and may not be sent",
}

// chatRequest is the chat completions body the translation produces (field order as vLLM's
// ChatCompletionRequest has them; absent values are omitted).
type chatRequest struct {
	Model              json.RawMessage `json:"model"`
	Messages           []chatMsg       `json:"messages"`
	MaxTokens          json.RawMessage `json:"max_tokens"`
	Stop               json.RawMessage `json:"stop,omitempty"`
	Temperature        json.RawMessage `json:"temperature,omitempty"`
	TopP               json.RawMessage `json:"top_p,omitempty"`
	TopK               json.RawMessage `json:"top_k,omitempty"`
	Stream             bool            `json:"stream,omitempty"`
	User               json.RawMessage `json:"user,omitempty"`
	Tools              []chatTool      `json:"tools,omitempty"`
	ToolChoice         any             `json:"tool_choice,omitempty"`
	ParallelToolCalls  *bool           `json:"parallel_tool_calls,omitempty"`
	ResponseFormat     any             `json:"response_format,omitempty"`
	ReasoningEffort    json.RawMessage `json:"reasoning_effort,omitempty"`
	ChatTemplateKwargs json.RawMessage `json:"chat_template_kwargs,omitempty"`
}

type chatMsg struct {
	Role       string          `json:"role"`
	Content    json.RawMessage `json:"content,omitempty"`
	Reasoning  json.RawMessage `json:"reasoning,omitempty"`
	ToolCalls  []chatToolCall  `json:"tool_calls,omitempty"`
	ToolCallID json.RawMessage `json:"tool_call_id,omitempty"`
}

type chatToolCall struct {
	ID       json.RawMessage `json:"id"`
	Type     string          `json:"type"`
	Function struct {
		Name      json.RawMessage `json:"name"`
		Arguments string          `json:"arguments"`
	} `json:"function"`
}

type chatTool struct {
	Type     string `json:"type"`
	Function struct {
		Name        json.RawMessage `json:"name"`
		Description json.RawMessage `json:"description,omitempty"`
		Parameters  json.RawMessage `json:"parameters"`
	} `json:"function"`
}

type chatTextPart struct {
	Type string          `json:"type"`
	Text json.RawMessage `json:"text"`
}

// block is one content block of a Messages message (or of system, or of a tool_result).
type block struct {
	Type      string          `json:"type"`
	Text      json.RawMessage `json:"text"`
	Thinking  json.RawMessage `json:"thinking"`
	ID        json.RawMessage `json:"id"`
	Name      json.RawMessage `json:"name"`
	Input     json.RawMessage `json:"input"`
	ToolUseID json.RawMessage `json:"tool_use_id"`
	Content   json.RawMessage `json:"content"`
	IsError   json.RawMessage `json:"is_error"`
}

// parseMessagesBody validates a Messages body and translates it into the chat completions body
// the engines run (its ClientBody, endpoint EndpointMessages).
func parseMessagesBody(raw []byte) (*ClientBody, error) {
	chat, bad := translateMessages(raw)
	if bad != nil {
		return nil, bad
	}
	b, err := ParseClientBody(EndpointChat, chat)
	if err != nil {
		return nil, err
	}
	b.Endpoint = EndpointMessages
	// The usage chunk becomes the message_delta event's usage: the relay must see it.
	b.IncludeUsage = true
	return b, nil
}

// ParseCountTokensBody validates the body of a Messages count_tokens request (model, messages,
// system, tools, …: a Messages request without max_tokens, which counting has no use for) and
// translates it as parseMessagesBody does, so its prompt is the one a Messages request with
// the same fields would run.
func ParseCountTokensBody(raw []byte) (*ClientBody, error) {
	fields, err := ScanObject(raw, make([]Field, 0, 16))
	if err != nil {
		return nil, bodyError(err)
	}
	for _, f := range fields {
		if string(raw[f.keyStart:f.keyEnd]) == `"max_tokens"` {
			return parseMessagesBody(raw)
		}
	}
	open := bytes.IndexByte(raw, '{') + 1
	filled := make([]byte, 0, len(raw)+16)
	filled = append(filled, raw[:open]...)
	filled = append(filled, `"max_tokens":1`...)
	if len(fields) > 0 {
		filled = append(filled, ',')
	}
	return parseMessagesBody(append(filled, raw[open:]...))
}

// translateMessages turns a Messages request body into the chat completions body vLLM's Messages
// handler would run (vllm/entrypoints/anthropic/serving.py), or says which field it cannot
// honour.
func translateMessages(raw []byte) ([]byte, *BadRequestError) {
	fields, err := ScanObject(raw, make([]Field, 0, 16))
	if err != nil {
		return nil, bodyError(err)
	}
	for _, f := range fields {
		var key string
		if json.Unmarshal(raw[f.keyStart:f.keyEnd], &key) != nil {
			return nil, badRequest("", "request body is not valid JSON")
		}
		if why, ok := messagesRefused[key]; ok {
			if v := raw[f.valStart:f.valEnd]; !IsNull(v) && !defaultSetting(key, v) {
				return nil, badRequest(key, "%s", why)
			}
			continue
		}
		if !messagesKnown[key] {
			return nil, badRequest(key, "%s: unknown or unsupported Messages API field", key)
		}
	}
	var req messagesRequest
	if err := json.Unmarshal(raw, &req); err != nil {
		return nil, badRequest("", "request body does not match the Messages API: %v", err)
	}
	out := chatRequest{Model: req.Model, ChatTemplateKwargs: nonNull(req.ChatTemplateKwargs)}
	if !isString(req.Model) || string(req.Model) == `""` {
		return nil, badRequest("model", "model: a non-empty string is required")
	}
	var maxTokens int64
	if json.Unmarshal(req.MaxTokens, &maxTokens) != nil || maxTokens < 1 {
		return nil, badRequest("max_tokens", "max_tokens: a positive integer is required")
	}
	out.MaxTokens = req.MaxTokens
	for _, num := range []struct {
		name string
		v    json.RawMessage
		dst  *json.RawMessage
	}{{"temperature", req.Temperature, &out.Temperature}, {"top_p", req.TopP, &out.TopP}, {"top_k", req.TopK, &out.TopK}} {
		if v := nonNull(num.v); v != nil {
			var f float64
			if json.Unmarshal(v, &f) != nil {
				return nil, badRequest(num.name, "%s must be a number", num.name)
			}
			*num.dst = v
		}
	}
	if v := nonNull(req.StopSequences); v != nil {
		var stops []string
		if json.Unmarshal(v, &stops) != nil {
			return nil, badRequest("stop_sequences", "stop_sequences must be an array of strings")
		}
		out.Stop = v
	}
	if v := nonNull(req.Stream); v != nil && json.Unmarshal(v, &out.Stream) != nil {
		return nil, badRequest("stream", "stream must be true or false")
	}
	if v := nonNull(req.Metadata); v != nil {
		var md map[string]json.RawMessage
		if json.Unmarshal(v, &md) != nil {
			return nil, badRequest("metadata", "metadata must be an object")
		}
		for k, uv := range md {
			if k != "user_id" {
				return nil, badRequest("metadata."+k, "metadata.%s is not supported: metadata takes user_id only", k)
			}
			if uv = nonNull(uv); uv != nil {
				if !isString(uv) {
					return nil, badRequest("metadata.user_id", "metadata.user_id must be a string")
				}
				out.User = uv // chat's end-user identifier
			}
		}
	}
	if bad := translateSystem(req.System, &out); bad != nil {
		return nil, bad
	}
	if bad := translateMessageList(req.Messages, &out); bad != nil {
		return nil, bad
	}
	if bad := translateTools(req.Tools, req.ToolChoice, &out); bad != nil {
		return nil, bad
	}
	if bad := translateOutputConfig(req.OutputConfig, &out); bad != nil {
		return nil, bad
	}
	body, err := json.Marshal(out)
	if err != nil {
		return nil, badRequest("", "request could not be translated: %v", err)
	}
	return body, nil
}

// defaultSetting reports whether a member the engines cannot vary asks for what they do anyway:
// thinking disabled, the standard service tier.
func defaultSetting(key string, v []byte) bool {
	switch key {
	case "thinking":
		var t struct {
			Type string `json:"type"`
		}
		return json.Unmarshal(v, &t) == nil && t.Type == "disabled"
	case "service_tier":
		return string(v) == `"auto"` || string(v) == `"standard_only"`
	}
	return false
}

func nonNull(v json.RawMessage) json.RawMessage {
	if len(v) == 0 || IsNull(v) {
		return nil
	}
	return v
}

func isString(v []byte) bool { return len(v) >= 2 && v[0] == '"' }

// textOf returns a text block's text (a JSON string, raw), or nil when it is not a string.
func textOf(b *block) json.RawMessage {
	if !isString(b.Text) {
		return nil
	}
	return b.Text
}

// translateSystem makes system (a string, or text blocks) the chat's first message, the blocks'
// texts joined as vLLM joins them.
func translateSystem(system json.RawMessage, out *chatRequest) *BadRequestError {
	system = nonNull(system)
	if system == nil {
		return nil
	}
	if isString(system) {
		out.Messages = append(out.Messages, chatMsg{Role: "system", Content: system})
		return nil
	}
	var blocks []block
	if json.Unmarshal(system, &blocks) != nil {
		return badRequest("system", "system must be a string or an array of text blocks")
	}
	var joined []string
	for _, b := range blocks {
		t := textOf(&b)
		if b.Type != "text" || t == nil {
			return badRequest("system", "system blocks must be text blocks (got %q)", b.Type)
		}
		var s string
		_ = json.Unmarshal(t, &s)
		joined = append(joined, s)
	}
	content, _ := json.Marshal(strings.Join(joined, ""))
	out.Messages = append(out.Messages, chatMsg{Role: "system", Content: content})
	return nil
}

// translateMessageList maps the messages, block by block, as vLLM's _convert_messages does.
func translateMessageList(raw json.RawMessage, out *chatRequest) *BadRequestError {
	var msgs []struct {
		Role    string          `json:"role"`
		Content json.RawMessage `json:"content"`
	}
	if json.Unmarshal(raw, &msgs) != nil || len(msgs) == 0 {
		return badRequest("messages", "messages must be a non-empty array of {role, content} objects")
	}
	for i, m := range msgs {
		if m.Role != "user" && m.Role != "assistant" {
			return badRequest("messages", "messages[%d].role must be user or assistant (system prompts go in system)", i)
		}
		if isString(m.Content) {
			out.Messages = append(out.Messages, chatMsg{Role: m.Role, Content: m.Content})
			continue
		}
		var blocks []block
		if json.Unmarshal(m.Content, &blocks) != nil {
			return badRequest("messages", "messages[%d].content must be a string or an array of content blocks", i)
		}
		msg := chatMsg{Role: m.Role}
		var parts []chatTextPart
		for _, b := range blocks {
			switch {
			case b.Type == "text" && textOf(&b) != nil:
				if nonEmptyString(b.Text) { // vLLM drops empty text blocks
					parts = append(parts, chatTextPart{Type: "text", Text: b.Text})
				}
			case b.Type == "thinking" && m.Role == "assistant" && isString(b.Thinking):
				msg.Reasoning = b.Thinking // vLLM: the assistant message's reasoning
			case b.Type == "tool_use" && m.Role == "assistant":
				call, bad := toolCall(i, &b)
				if bad != nil {
					return bad
				}
				msg.ToolCalls = append(msg.ToolCalls, call)
			case b.Type == "tool_result" && m.Role == "user":
				tm, bad := toolMessage(i, &b)
				if bad != nil {
					return bad
				}
				out.Messages = append(out.Messages, tm)
			default:
				return badRequest("messages", "messages[%d]: %s content blocks are not supported in a %s message "+
					"(supported: text; thinking and tool_use from the assistant; tool_result from the user)", i, blockName(b.Type), m.Role)
			}
		}
		switch {
		case len(parts) == 1:
			msg.Content = parts[0].Text
		case len(parts) > 1:
			msg.Content, _ = json.Marshal(parts)
		case msg.ToolCalls == nil && msg.Reasoning == nil:
			continue // only tool results (or nothing): no message of its own, as in vLLM
		}
		out.Messages = append(out.Messages, msg)
	}
	return nil
}

func blockName(t string) string {
	if t == "" {
		return "untyped"
	}
	return t
}

// toolCall maps a tool_use block to a chat tool call: its input object becomes the arguments
// string.
func toolCall(i int, b *block) (chatToolCall, *BadRequestError) {
	var c chatToolCall
	if !isString(b.ID) || !isString(b.Name) {
		return c, badRequest("messages", "messages[%d]: a tool_use block needs a string id and name", i)
	}
	input := nonNull(b.Input)
	if input == nil {
		input = json.RawMessage("{}")
	}
	if input[0] != '{' {
		return c, badRequest("messages", "messages[%d]: a tool_use block's input must be an object", i)
	}
	var compact bytes.Buffer
	if json.Compact(&compact, input) != nil {
		return c, badRequest("messages", "messages[%d]: a tool_use block's input is not valid JSON", i)
	}
	c.ID, c.Type = b.ID, "function"
	c.Function.Name, c.Function.Arguments = b.Name, compact.String()
	return c, nil
}

// toolMessage maps a user's tool_result block to a chat tool message: its content (a string or
// text blocks, joined by newlines as vLLM joins them).
func toolMessage(i int, b *block) (chatMsg, *BadRequestError) {
	if !isString(b.ToolUseID) {
		return chatMsg{}, badRequest("messages", "messages[%d]: a tool_result block needs a string tool_use_id", i)
	}
	m := chatMsg{Role: "tool", ToolCallID: b.ToolUseID}
	content := nonNull(b.Content)
	switch {
	case content == nil:
		m.Content = json.RawMessage(`""`)
	case isString(content):
		m.Content = content
	default:
		var blocks []block
		if json.Unmarshal(content, &blocks) != nil {
			return m, badRequest("messages", "messages[%d]: a tool_result's content must be a string or text blocks", i)
		}
		texts := make([]string, 0, len(blocks))
		for _, tb := range blocks {
			if tb.Type != "text" || textOf(&tb) == nil {
				return m, badRequest("messages", "messages[%d]: a tool_result's content may hold text blocks only (got %s)", i, blockName(tb.Type))
			}
			var s string
			_ = json.Unmarshal(tb.Text, &s)
			texts = append(texts, s)
		}
		m.Content, _ = json.Marshal(strings.Join(texts, "\n"))
	}
	return m, nil
}

// translateTools maps tools to chat functions and tool_choice to chat's, as vLLM's
// _convert_tools and _convert_tool_choice do (any is required; tools without a choice are auto).
// disable_parallel_tool_use maps to chat's parallel_tool_calls.
func translateTools(tools, choice json.RawMessage, out *chatRequest) *BadRequestError {
	if tools = nonNull(tools); tools != nil {
		var list []struct {
			Type        string          `json:"type"`
			Name        json.RawMessage `json:"name"`
			Description json.RawMessage `json:"description"`
			InputSchema json.RawMessage `json:"input_schema"`
			Strict      *bool           `json:"strict"`
		}
		if json.Unmarshal(tools, &list) != nil {
			return badRequest("tools", "tools must be an array of tool definitions")
		}
		for i, t := range list {
			if t.Type != "" && t.Type != "custom" {
				return badRequest("tools", "tools[%d]: %s tools are not supported: the engines run client tools only", i, t.Type)
			}
			if !isString(t.Name) || len(t.InputSchema) == 0 || t.InputSchema[0] != '{' {
				return badRequest("tools", "tools[%d] needs a string name and an input_schema object", i)
			}
			if t.Strict != nil && *t.Strict {
				return badRequest("tools", "tools[%d]: strict tools are not supported", i)
			}
			var ct chatTool
			ct.Type = "function"
			ct.Function.Name, ct.Function.Description, ct.Function.Parameters = t.Name, nonNull(t.Description), t.InputSchema
			out.Tools = append(out.Tools, ct)
		}
	}
	if choice = nonNull(choice); choice == nil {
		if out.Tools != nil {
			out.ToolChoice = "auto"
		}
		return nil
	}
	var tc struct {
		Type                   string          `json:"type"`
		Name                   json.RawMessage `json:"name"`
		DisableParallelToolUse *bool           `json:"disable_parallel_tool_use"`
	}
	if json.Unmarshal(choice, &tc) != nil {
		return badRequest("tool_choice", "tool_choice must be an object with a type")
	}
	switch tc.Type {
	case "auto", "none":
		out.ToolChoice = tc.Type
	case "any":
		out.ToolChoice = "required"
	case "tool":
		if !isString(tc.Name) {
			return badRequest("tool_choice", "tool_choice.name is required when type is tool")
		}
		out.ToolChoice = map[string]any{"type": "function", "function": map[string]json.RawMessage{"name": tc.Name}}
	default:
		return badRequest("tool_choice", "tool_choice.type must be auto, any, tool or none")
	}
	if tc.Type != "none" && out.Tools == nil {
		return badRequest("tool_choice", "tool_choice needs tools")
	}
	if tc.DisableParallelToolUse != nil && *tc.DisableParallelToolUse {
		f := false
		out.ParallelToolCalls = &f
	}
	return nil
}

// translateOutputConfig maps output_config as vLLM's _handle_output_config does: a JSON schema
// format becomes chat's response_format (named after its type), effort its reasoning_effort.
func translateOutputConfig(raw json.RawMessage, out *chatRequest) *BadRequestError {
	if raw = nonNull(raw); raw == nil {
		return nil
	}
	var oc struct {
		Effort json.RawMessage `json:"effort"`
		Format *struct {
			Type   string          `json:"type"`
			Schema json.RawMessage `json:"schema"`
		} `json:"format"`
	}
	if json.Unmarshal(raw, &oc) != nil {
		return badRequest("output_config", "output_config must be an object with effort and format")
	}
	if e := nonNull(oc.Effort); e != nil {
		var effort string
		if json.Unmarshal(e, &effort) != nil || !strings.Contains(" low medium high xhigh max ", " "+effort+" ") {
			return badRequest("output_config.effort", "output_config.effort must be low, medium, high, xhigh or max")
		}
		out.ReasoningEffort = e
	}
	if f := oc.Format; f != nil {
		schema := nonNull(f.Schema)
		if f.Type != "json_schema" || schema == nil || schema[0] != '{' {
			return badRequest("output_config.format", "output_config.format must be {\"type\":\"json_schema\",\"schema\":{...}}")
		}
		out.ResponseFormat = map[string]any{"type": "json_schema",
			"json_schema": map[string]any{"name": "json_schema", "schema": schema}}
	}
	return nil
}
