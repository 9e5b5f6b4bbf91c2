package sim

// completionShape renders /v1/completions bodies like vLLM's CompletionResponse and
// CompletionStreamResponse (see testdata/vllm/completions-stream.sse and
// prefill-response-v2.json).
type completionShape struct {
	g      *generation
	head   []byte // the chunk prefix, same for every chunk of the stream
	offset int    // text offset of the next streamed token
	choice int    // the choice's index (n > 1); its tokens start that many words later
}

func newCompletionShape(g *generation, choice int) *completionShape {
	return &completionShape{g: g, head: g.appendHead(nil, "text_completion"), choice: choice}
}

// tok is the text of the choice's output token i.
func (s *completionShape) tok(i int) string { return TokenText(i + s.choice) }

func (s *completionShape) appendStart(b []byte) ([]byte, bool) { return b, false }

func (s *completionShape) appendPiece(b []byte, i int, finish string) []byte {
	b = append(b, s.head...)
	b = append(b, `,"choices":[{"index":`...)
	b = appendInt(b, s.choice)
	b = append(b, `,"text":`...)
	b = appendString(b, s.tok(i))
	b = append(b, `,"logprobs":`...)
	b = s.appendLogprobs(b, i, i+1, s.offset)
	s.offset += len(s.tok(i))
	b = append(b, `,"finish_reason":`...)
	b = appendFinishReason(b, finish)
	return append(b, `,"stop_reason":null}]}`...)
}

// appendFinish is never needed: completions always finish on their last token.
func (s *completionShape) appendFinish(b []byte, finish string) []byte {
	b = append(b, s.head...)
	b = append(b, `,"choices":[{"index":`...)
	b = appendInt(b, s.choice)
	b = append(b, `,"text":"","logprobs":null,"finish_reason":`...)
	b = appendFinishReason(b, finish)
	return append(b, `,"stop_reason":null}]}`...)
}

func (s *completionShape) appendUsage(b []byte) []byte {
	b = append(b, s.head...)
	b = append(b, `,"choices":[],`...)
	b = s.g.appendUsageObject(b, false)
	return append(b, '}')
}

func (s *completionShape) appendResponse(b []byte, finish string, kv []byte) []byte {
	n := s.g.plan.len()
	b = append(b, s.head...)
	b = append(b, `,"choices":[`...)
	for c := range s.g.req.n {
		if c > 0 {
			b = append(b, ',')
		}
		cs := &completionShape{g: s.g, choice: c}
		b = append(b, `{"index":`...)
		b = appendInt(b, c)
		b = append(b, `,"text":`...)
		b = appendString(b, s.g.plan.joinedAt(pieceContent, c))
		b = append(b, `,"logprobs":`...)
		b = cs.appendLogprobs(b, 0, n, 0)
		b = append(b, `,"finish_reason":`...)
		b = appendFinishReason(b, finish)
		b = append(b, `,"stop_reason":null,"prompt_logprobs":null}`...)
	}
	b = append(b, "],"...)
	b = s.g.appendUsageObject(b, true)
	b = append(b, `,"kv_transfer_params":`...)
	b = append(b, kv...)
	return append(b, '}')
}

// appendLogprobs appends vLLM's CompletionLogProbs for tokens [from, to), or null when
// the request did not ask for logprobs. offset is the text offset of token from,
// counted from the start of the output.
func (s *completionShape) appendLogprobs(b []byte, from, to, offset int) []byte {
	if !s.g.req.wantLogprobs {
		return append(b, "null"...)
	}
	b = append(b, `{"text_offset":[`...)
	for i := from; i < to; i++ {
		if i > from {
			b = append(b, ',')
		}
		b = appendInt(b, offset)
		offset += len(s.tok(i))
	}
	b = append(b, `],"token_logprobs":[`...)
	for i := from; i < to; i++ {
		if i > from {
			b = append(b, ',')
		}
		b = appendFloat(b, tokenLogprob(i+s.choice))
	}
	b = append(b, `],"tokens":[`...)
	for i := from; i < to; i++ {
		if i > from {
			b = append(b, ',')
		}
		b = appendString(b, s.tok(i))
	}
	// Each position maps the sampled token and its runners-up to their logprobs; vLLM
	// always includes the sampled token, so logprobs=0 still gives one entry.
	b = append(b, `],"top_logprobs":[`...)
	for i := from; i < to; i++ {
		if i > from {
			b = append(b, ',')
		}
		b = append(b, '{')
		b = appendString(b, s.tok(i))
		b = append(b, ':')
		b = appendFloat(b, tokenLogprob(i+s.choice))
		for rank := 1; rank < s.g.req.logprobs; rank++ {
			b = append(b, ',')
			b = appendString(b, altToken(i+s.choice, rank))
			b = append(b, ':')
			b = appendFloat(b, altLogprob(i+s.choice, rank))
		}
		b = append(b, '}')
	}
	return append(b, "]}"...)
}
