package wire

import (
	"bytes"
	"sort"

	"github.com/goccy/go-json"
)

// Assembler builds the non-streaming OpenAI response from the chunks of a decode stream, so a
// client that did not ask for streaming still gets every timeout and failure check of the
// streaming path. Per choice it concatenates text/content/reasoning and logprobs, merges
// tool-call deltas by index, and keeps the last finish_reason; usage comes from the usage chunk.
type Assembler struct {
	endpoint Endpoint
	id       string
	created  int64
	model    string
	choices  map[int]*choiceAcc
	usage    json.RawMessage
	response json.RawMessage // Responses API: the final response object
}

type choiceAcc struct {
	text, content, reasoning bytes.Buffer
	reasoningKey             string
	role                     string
	finishReason             *string
	stopReason               json.RawMessage
	toolCalls                map[int]*toolCallAcc
	// completions logprobs, concatenated field by field
	lpTokens, lpTokenLogprobs, lpTopLogprobs, lpTextOffset []json.RawMessage
	// chat logprobs
	lpContent   []json.RawMessage
	sawLogprobs bool
}

type toolCallAcc struct {
	id, typ, name string
	args          bytes.Buffer
}

type wireChunk struct {
	ID      string          `json:"id"`
	Created int64           `json:"created"`
	Model   string          `json:"model"`
	Usage   json.RawMessage `json:"usage"`
	Choices []struct {
		Index        int             `json:"index"`
		Text         *string         `json:"text"`
		FinishReason *string         `json:"finish_reason"`
		StopReason   json.RawMessage `json:"stop_reason"`
		Logprobs     *struct {
			Tokens        []json.RawMessage `json:"tokens"`
			TokenLogprobs []json.RawMessage `json:"token_logprobs"`
			TopLogprobs   []json.RawMessage `json:"top_logprobs"`
			TextOffset    []json.RawMessage `json:"text_offset"`
			Content       []json.RawMessage `json:"content"`
		} `json:"logprobs"`
		Delta *struct {
			Role             string  `json:"role"`
			Content          *string `json:"content"`
			Reasoning        *string `json:"reasoning"`
			ReasoningContent *string `json:"reasoning_content"`
			ToolCalls        []struct {
				Index    int    `json:"index"`
				ID       string `json:"id"`
				Type     string `json:"type"`
				Function *struct {
					Name      string `json:"name"`
					Arguments string `json:"arguments"`
				} `json:"function"`
			} `json:"tool_calls"`
		} `json:"delta"`
	} `json:"choices"`
}

// NewAssembler starts the response of a stream for endpoint ep.
func NewAssembler(ep Endpoint) *Assembler {
	return &Assembler{endpoint: ep, choices: map[int]*choiceAcc{}}
}

// Add folds one event's data into the response.
func (a *Assembler) Add(data []byte) {
	if a.endpoint == EndpointResponses {
		a.addResponses(data)
		return
	}
	var c wireChunk
	if err := json.Unmarshal(data, &c); err != nil {
		return
	}
	if a.id == "" {
		a.id, a.created, a.model = c.ID, c.Created, c.Model
	}
	if len(c.Usage) > 0 && !IsNull(c.Usage) {
		a.usage = append(a.usage[:0], c.Usage...)
	}
	for _, ch := range c.Choices {
		acc := a.choices[ch.Index]
		if acc == nil {
			acc = &choiceAcc{}
			a.choices[ch.Index] = acc
		}
		if ch.Text != nil {
			acc.text.WriteString(*ch.Text)
		}
		if ch.FinishReason != nil {
			acc.finishReason = ch.FinishReason
			acc.stopReason = append(acc.stopReason[:0], ch.StopReason...)
		}
		if lp := ch.Logprobs; lp != nil {
			acc.sawLogprobs = true
			acc.lpTokens = append(acc.lpTokens, lp.Tokens...)
			acc.lpTokenLogprobs = append(acc.lpTokenLogprobs, lp.TokenLogprobs...)
			acc.lpTopLogprobs = append(acc.lpTopLogprobs, lp.TopLogprobs...)
			acc.lpTextOffset = append(acc.lpTextOffset, lp.TextOffset...)
			acc.lpContent = append(acc.lpContent, lp.Content...)
		}
		d := ch.Delta
		if d == nil {
			continue
		}
		if d.Role != "" {
			acc.role = d.Role
		}
		if d.Content != nil {
			acc.content.WriteString(*d.Content)
		}
		// Newer vLLM sends the same text as both reasoning and the deprecated
		// reasoning_content: take one per delta, preferring the new name.
		switch {
		case d.Reasoning != nil:
			acc.reasoning.WriteString(*d.Reasoning)
			acc.reasoningKey = "reasoning"
		case d.ReasoningContent != nil:
			acc.reasoning.WriteString(*d.ReasoningContent)
			if acc.reasoningKey == "" {
				acc.reasoningKey = "reasoning_content"
			}
		}
		for _, tc := range d.ToolCalls {
			if acc.toolCalls == nil {
				acc.toolCalls = map[int]*toolCallAcc{}
			}
			t := acc.toolCalls[tc.Index]
			if t == nil {
				t = &toolCallAcc{}
				acc.toolCalls[tc.Index] = t
			}
			if tc.ID != "" {
				t.id = tc.ID
			}
			if tc.Type != "" {
				t.typ = tc.Type
			}
			if tc.Function != nil {
				if tc.Function.Name != "" {
					t.name = tc.Function.Name
				}
				t.args.WriteString(tc.Function.Arguments)
			}
		}
	}
}

// Output shapes, in vLLM's key order.
type (
	completionOut struct {
		ID      string             `json:"id"`
		Object  string             `json:"object"`
		Created int64              `json:"created"`
		Model   string             `json:"model"`
		Choices []completionChoice `json:"choices"`
		Usage   json.RawMessage    `json:"usage"`
	}
	completionChoice struct {
		Index        int             `json:"index"`
		Text         string          `json:"text"`
		Logprobs     any             `json:"logprobs"`
		FinishReason *string         `json:"finish_reason"`
		StopReason   json.RawMessage `json:"stop_reason"`
	}
	chatOut struct {
		ID      string          `json:"id"`
		Object  string          `json:"object"`
		Created int64           `json:"created"`
		Model   string          `json:"model"`
		Choices []chatChoice    `json:"choices"`
		Usage   json.RawMessage `json:"usage"`
	}
	chatChoice struct {
		Index        int             `json:"index"`
		Message      chatMessage     `json:"message"`
		Logprobs     any             `json:"logprobs"`
		FinishReason *string         `json:"finish_reason"`
		StopReason   json.RawMessage `json:"stop_reason"`
	}
	chatMessage struct {
		Role             string        `json:"role"`
		Content          *string       `json:"content"`
		Reasoning        *string       `json:"reasoning,omitempty"`
		ReasoningContent *string       `json:"reasoning_content,omitempty"`
		ToolCalls        []toolCallOut `json:"tool_calls"`
	}
	toolCallOut struct {
		ID       string `json:"id"`
		Type     string `json:"type"`
		Function struct {
			Name      string `json:"name"`
			Arguments string `json:"arguments"`
		} `json:"function"`
	}
)

var jsonNull = json.RawMessage("null")

func orNull(r json.RawMessage) json.RawMessage {
	if len(r) == 0 {
		return jsonNull
	}
	return r
}

// Body returns the assembled response JSON.
func (a *Assembler) Body() ([]byte, error) {
	if a.endpoint == EndpointResponses {
		if len(a.response) == 0 || a.response[0] != '{' {
			return nil, errNoResponse{}
		}
		return a.response, nil
	}
	idx := make([]int, 0, len(a.choices))
	for i := range a.choices {
		idx = append(idx, i)
	}
	sort.Ints(idx)
	if a.endpoint == EndpointCompletions {
		out := completionOut{ID: a.id, Object: "text_completion", Created: a.created, Model: a.model, Usage: orNull(a.usage)}
		for _, i := range idx {
			acc := a.choices[i]
			ch := completionChoice{Index: i, Text: acc.text.String(), FinishReason: acc.finishReason, StopReason: orNull(acc.stopReason)}
			if acc.sawLogprobs {
				ch.Logprobs = map[string][]json.RawMessage{
					"tokens": nonNil(acc.lpTokens), "token_logprobs": nonNil(acc.lpTokenLogprobs),
					"top_logprobs": nonNil(acc.lpTopLogprobs), "text_offset": nonNil(acc.lpTextOffset),
				}
			}
			out.Choices = append(out.Choices, ch)
		}
		return json.Marshal(out)
	}
	out := chatOut{ID: a.id, Object: "chat.completion", Created: a.created, Model: a.model, Usage: orNull(a.usage)}
	for _, i := range idx {
		acc := a.choices[i]
		role := acc.role
		if role == "" {
			role = "assistant"
		}
		content := acc.content.String()
		msg := chatMessage{Role: role, Content: &content}
		if acc.reasoningKey != "" {
			r := acc.reasoning.String()
			if acc.reasoningKey == "reasoning" {
				msg.Reasoning = &r
			} else {
				msg.ReasoningContent = &r
			}
		}
		calls := make([]toolCallOut, 0, len(acc.toolCalls))
		tcIdx := make([]int, 0, len(acc.toolCalls))
		for k := range acc.toolCalls {
			tcIdx = append(tcIdx, k)
		}
		sort.Ints(tcIdx)
		for _, k := range tcIdx {
			t := acc.toolCalls[k]
			var c toolCallOut
			c.ID, c.Type, c.Function.Name, c.Function.Arguments = t.id, t.typ, t.name, t.args.String()
			if c.Type == "" {
				c.Type = "function"
			}
			calls = append(calls, c)
		}
		msg.ToolCalls = calls
		if len(calls) > 0 && content == "" {
			msg.Content = nil
		}
		ch := chatChoice{Index: i, Message: msg, FinishReason: acc.finishReason, StopReason: orNull(acc.stopReason)}
		if acc.sawLogprobs {
			ch.Logprobs = map[string][]json.RawMessage{"content": nonNil(acc.lpContent)}
		}
		out.Choices = append(out.Choices, ch)
	}
	if a.endpoint == EndpointMessages {
		return messagesAnswer(&out)
	}
	return json.Marshal(out)
}

func nonNil(s []json.RawMessage) []json.RawMessage {
	if s == nil {
		return []json.RawMessage{}
	}
	return s
}

// Usage is the stream's usage object, if it sent one.
func (a *Assembler) Usage() json.RawMessage { return a.usage }
