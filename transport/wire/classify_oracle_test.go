package wire

import (
	"bytes"

	"github.com/goccy/go-json"
)

// classifyOracle is Classify as it was before the in-place scan: the event decoded with
// goccy/go-json into the struct below. The scan must give its verdict for every input
// (TestClassifyMatchesDecoder, FuzzClassifyMatchesDecoder).
func classifyOracle(data []byte) EventKind {
	if data == nil {
		return EventMeta
	}
	if bytes.Equal(data, doneData) {
		return EventDone
	}
	if IsErrorData(data) {
		return EventError
	}
	var c oracleChunk
	if err := json.Unmarshal(data, &c); err != nil {
		return EventMeta
	}
	if c.Type != "" && c.Choices == nil {
		return oracleResponses(c.Type, c.Delta)
	}
	for _, ch := range c.Choices {
		if ch.FinishReason != nil || (ch.Text != nil && *ch.Text != "") {
			return EventToken
		}
		if d := ch.Delta; d != nil {
			if oracleNonEmpty(d.Content) || oracleNonEmpty(d.Reasoning) || oracleNonEmpty(d.ReasoningContent) ||
				(len(d.ToolCalls) > 2 && !IsNull(d.ToolCalls)) {
				return EventToken
			}
		}
	}
	if len(c.Choices) == 0 && len(c.Usage) > 0 && !IsNull(c.Usage) {
		return EventUsage
	}
	return EventMeta
}

type oracleChunk struct {
	Choices []struct {
		Text         *string      `json:"text"`
		Delta        *oracleDelta `json:"delta"`
		FinishReason *string      `json:"finish_reason"`
	} `json:"choices"`
	Usage json.RawMessage `json:"usage"`
	Type  string          `json:"type"`
	Delta json.RawMessage `json:"delta"`
}

type oracleDelta struct {
	Content          *string         `json:"content"`
	Reasoning        *string         `json:"reasoning"`
	ReasoningContent *string         `json:"reasoning_content"`
	ToolCalls        json.RawMessage `json:"tool_calls"`
}

func oracleNonEmpty(s *string) bool { return s != nil && *s != "" }

func oracleResponses(typ string, delta json.RawMessage) EventKind {
	switch typ {
	case "response.completed", "response.incomplete":
		return EventDone
	case "response.failed", "error":
		return EventError
	case "response.output_item.done":
		return EventToken
	}
	if len(typ) > 6 && typ[len(typ)-6:] == ".delta" && len(delta) > 0 && !IsNull(delta) && string(delta) != `""` {
		return EventToken
	}
	return EventMeta
}
