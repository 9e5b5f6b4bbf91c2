package sim

import (
	"fmt"
	"hash/fnv"
	"strconv"
	"strings"
)

// outputPlan is the sequence of output pieces one generation emits: first reasoning
// tokens (chat, reasoning=N), then either a tool call split over three deltas
// (chat, tool_call) or content tokens. Each piece is one SSE chunk and one completion
// token.
type outputPlan struct {
	reasoning int
	toolCall  bool
	content   int
}

type pieceKind uint8

const (
	pieceContent pieceKind = iota
	pieceReasoning
	pieceToolHead // the delta naming the function, arguments ""
	pieceToolArgs // an arguments fragment
)

// The tool call every tool_call directive produces, split exactly like
// chat-stream-tool-call.sse.
const toolName = "get_weather"

var toolArgs = [...]string{`{"city": `, `"Oslo"}`}

func (p outputPlan) len() int {
	if p.toolCall {
		return p.reasoning + 1 + len(toolArgs)
	}
	return p.reasoning + p.content
}

// at returns the kind of piece i and its index among pieces of that kind.
func (p outputPlan) at(i int) (pieceKind, int) {
	if i < p.reasoning {
		return pieceReasoning, i
	}
	i -= p.reasoning
	if !p.toolCall {
		return pieceContent, i
	}
	if i == 0 {
		return pieceToolHead, 0
	}
	return pieceToolArgs, i - 1
}

// joined concatenates the text of every piece of kind k (content or reasoning).
func (p outputPlan) joined(k pieceKind) string { return p.joinedAt(k, 0) }

// joinedAt is joined for choice c of n > 1, whose content tokens start c words later.
func (p outputPlan) joinedAt(k pieceKind, c int) string {
	var b strings.Builder
	for i := range p.len() {
		switch kind, j := p.at(i); {
		case kind != k:
		case k == pieceContent:
			b.WriteString(TokenText(j + c))
		case k == pieceReasoning:
			b.WriteString(reasoningText(j))
		}
	}
	return b.String()
}

// shape renders one API's bodies: completions.go and chat.go implement it.
type shape interface {
	// appendStart appends the event that opens a stream (chat's role delta) and
	// reports whether there is one.
	appendStart(b []byte) ([]byte, bool)
	// appendPiece appends the chunk carrying piece i; finish is "" except on the last
	// piece when that chunk also carries the finish reason.
	appendPiece(b []byte, i int, finish string) []byte
	// appendFinish appends a chunk that carries only the finish reason.
	appendFinish(b []byte, finish string) []byte
	// appendUsage appends the usage chunk sent before [DONE] when include_usage is set.
	appendUsage(b []byte) []byte
	// appendResponse appends the non-streaming body; kv is the raw kv_transfer_params.
	appendResponse(b []byte, finish string, kv []byte) []byte
}

// finishOnOwnChunk reports whether the plan's finish reason travels on an empty-delta
// chunk after the last piece (tool calls), rather than on the last piece.
func (p outputPlan) finishOnOwnChunk() bool { return p.toolCall }

// appendHead appends the fields every vLLM response and chunk starts with.
func (g *generation) appendHead(b []byte, object string) []byte {
	b = append(b, `{"id":`...)
	b = appendString(b, g.id)
	b = append(b, `,"object":"`...)
	b = append(b, object...)
	b = append(b, `","created":`...)
	b = strconv.AppendInt(b, g.created, 10)
	b = append(b, `,"model":`...)
	return appendString(b, g.req.model)
}

// appendUsageObject appends "usage":{...}; details says the body is non-streaming, where
// vLLM writes prompt_tokens_details even when it is null.
func (g *generation) appendUsageObject(b []byte, details bool) []byte {
	completion := g.plan.len() * max(g.req.n, 1) // every choice's tokens
	b = append(b, `"usage":{"prompt_tokens":`...)
	b = appendInt(b, g.req.promptTokens)
	b = append(b, `,"total_tokens":`...)
	b = appendInt(b, g.req.promptTokens+completion)
	b = append(b, `,"completion_tokens":`...)
	b = appendInt(b, completion)
	cached := 0
	if g.e.opts.PromptTokensDetails {
		cached = g.cachedTokens()
	}
	switch {
	case cached > 0:
		// vLLM sets prompt_tokens_details only when some tokens were cached; stream
		// chunks (dumped with exclude_unset) omit it otherwise.
		b = append(b, `,"prompt_tokens_details":{"cached_tokens":`...)
		b = appendInt(b, cached)
		b = append(b, '}')
	case details:
		b = append(b, `,"prompt_tokens_details":null`...)
	}
	return append(b, '}')
}

func appendFinishReason(b []byte, finish string) []byte {
	if finish == "" {
		return append(b, "null"...)
	}
	return appendString(b, finish)
}

// toolCallID is stable per request so streams can be compared byte for byte.
func (g *generation) toolCallID() string {
	h := fnv.New64a()
	_, _ = h.Write([]byte(g.id))
	return fmt.Sprintf("chatcmpl-tool-%016x", h.Sum64())
}
