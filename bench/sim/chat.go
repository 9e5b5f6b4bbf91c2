package sim

// chatShape renders /v1/chat/completions bodies like vLLM's ChatCompletionResponse and
// ChatCompletionStreamResponse (see testdata/vllm/chat-stream.sse,
// chat-stream-tool-call.sse and chat-response.json). Stream chunks are dumped by vLLM
// with exclude_unset, so a delta holds only the fields that piece sets and stop_reason
// appears only on the chunk that finishes the choice.
type chatShape struct {
	g      *generation
	head   []byte
	choice int // the choice's index (n > 1); its content tokens start that many words later
}

func newChatShape(g *generation, choice int) *chatShape {
	return &chatShape{g: g, head: g.appendHead(nil, "chat.completion.chunk"), choice: choice}
}

// appendIndex appends `,"choices":[{"index":<choice>`.
func (s *chatShape) appendIndex(b []byte) []byte {
	b = append(b, `,"choices":[{"index":`...)
	return appendInt(b, s.choice)
}

func (s *chatShape) appendStart(b []byte) ([]byte, bool) {
	b = append(b, s.head...)
	b = s.appendIndex(b)
	return append(b, `,"delta":{"role":"assistant","content":""},"logprobs":null,"finish_reason":null}]}`...), true
}

func (s *chatShape) appendPiece(b []byte, i int, finish string) []byte {
	b = append(b, s.head...)
	b = s.appendIndex(b)
	b = append(b, `,"delta":`...)
	kind, j := s.g.plan.at(i)
	switch kind {
	case pieceContent:
		b = append(b, `{"content":`...)
		b = appendString(b, TokenText(j+s.choice))
		b = append(b, '}')
	case pieceReasoning:
		// vLLM ≥ 0.11 names the field reasoning and, while the old name is deprecated,
		// copies it into reasoning_content.
		b = append(b, `{"reasoning":`...)
		b = appendString(b, reasoningText(j))
		b = append(b, `,"reasoning_content":`...)
		b = appendString(b, reasoningText(j))
		b = append(b, '}')
	case pieceToolHead:
		b = append(b, `{"tool_calls":[{"index":0,"id":`...)
		b = appendString(b, s.g.toolCallID())
		b = append(b, `,"type":"function","function":{"name":`...)
		b = appendString(b, toolName)
		b = append(b, `,"arguments":""}}]}`...)
	case pieceToolArgs:
		b = append(b, `{"tool_calls":[{"index":0,"function":{"arguments":`...)
		b = appendString(b, toolArgs[j])
		b = append(b, `}}]}`...)
	}
	b = append(b, `,"logprobs":`...)
	if kind == pieceContent && s.g.req.wantLogprobs {
		b = append(b, `{"content":[`...)
		b = s.appendLogprob(b, j)
		b = append(b, "]}"...)
	} else {
		b = append(b, "null"...)
	}
	return s.appendChoiceEnd(b, finish)
}

func (s *chatShape) appendFinish(b []byte, finish string) []byte {
	b = append(b, s.head...)
	b = s.appendIndex(b)
	b = append(b, `,"delta":{},"logprobs":null`...)
	return s.appendChoiceEnd(b, finish)
}

func (s *chatShape) appendChoiceEnd(b []byte, finish string) []byte {
	if finish == "" {
		return append(b, `,"finish_reason":null}]}`...)
	}
	b = append(b, `,"finish_reason":`...)
	b = appendString(b, finish)
	return append(b, `,"stop_reason":null}]}`...)
}

func (s *chatShape) appendUsage(b []byte) []byte {
	b = append(b, s.head...)
	b = append(b, `,"choices":[],`...)
	b = s.g.appendUsageObject(b, false)
	return append(b, '}')
}

func (s *chatShape) appendResponse(b []byte, finish string, kv []byte) []byte {
	g := s.g
	b = g.appendHead(b, "chat.completion")
	b = append(b, `,"choices":[`...)
	for c := range g.req.n {
		if c > 0 {
			b = append(b, ',')
		}
		b = (&chatShape{g: g, choice: c}).appendResponseChoice(b, finish)
	}
	b = append(b, "],"...)
	b = g.appendUsageObject(b, true)
	b = append(b, `,"prompt_logprobs":null,"kv_transfer_params":`...)
	b = append(b, kv...)
	return append(b, '}')
}

// appendResponseChoice appends the choice's object of a non-streaming body.
func (s *chatShape) appendResponseChoice(b []byte, finish string) []byte {
	g := s.g
	b = append(b, `{"index":`...)
	b = appendInt(b, s.choice)
	b = append(b, `,"message":{"role":"assistant","content":`...)
	if g.plan.toolCall {
		b = append(b, `null,"tool_calls":[{"id":`...)
		b = appendString(b, g.toolCallID())
		b = append(b, `,"type":"function","function":{"name":`...)
		b = appendString(b, toolName)
		b = append(b, `,"arguments":`...)
		b = appendString(b, toolArgs[0]+toolArgs[1])
		b = append(b, `}}]`...)
	} else {
		b = appendString(b, g.plan.joinedAt(pieceContent, s.choice))
		b = append(b, `,"tool_calls":[]`...)
	}
	b = append(b, `,"reasoning":`...)
	if g.plan.reasoning > 0 {
		b = appendString(b, g.plan.joined(pieceReasoning))
	} else {
		b = append(b, "null"...)
	}
	b = append(b, `},"logprobs":`...)
	if g.req.wantLogprobs && !g.plan.toolCall {
		b = append(b, `{"content":[`...)
		for j := range g.plan.content {
			if j > 0 {
				b = append(b, ',')
			}
			b = s.appendLogprob(b, j)
		}
		b = append(b, "]}"...)
	} else {
		b = append(b, "null"...)
	}
	b = append(b, `,"finish_reason":`...)
	b = appendFinishReason(b, finish)
	return append(b, `,"stop_reason":null}`...)
}

// appendLogprob appends one ChatCompletionLogProbsContent for content token j, with
// top_logprobs alternatives led by the sampled token.
func (s *chatShape) appendLogprob(b []byte, j int) []byte {
	j += s.choice
	b = appendTokenLogprob(b, TokenText(j), tokenLogprob(j))
	b = b[:len(b)-1] // reopen the object for top_logprobs
	b = append(b, `,"top_logprobs":[`...)
	for rank := 0; rank < s.g.req.logprobs; rank++ {
		if rank > 0 {
			b = append(b, ',')
			b = appendTokenLogprob(b, altToken(j, rank), altLogprob(j, rank))
		} else {
			b = appendTokenLogprob(b, TokenText(j), tokenLogprob(j))
		}
	}
	return append(b, "]}"...)
}

func appendTokenLogprob(b []byte, token string, lp float64) []byte {
	b = append(b, `{"token":`...)
	b = appendString(b, token)
	b = append(b, `,"logprob":`...)
	b = appendFloat(b, lp)
	b = append(b, `,"bytes":[`...)
	for k := 0; k < len(token); k++ {
		if k > 0 {
			b = append(b, ',')
		}
		b = appendInt(b, int(token[k]))
	}
	return append(b, "]}"...)
}
