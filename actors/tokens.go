package actors

import (
	"context"
	"slices"

	"github.com/narwhal-router/narwhal/actors/placement"
	"github.com/narwhal-router/narwhal/transport/fault"
	"github.com/narwhal-router/narwhal/transport/wire"
)

// A prompt's token blocks (placement.tokens, transport/tokenize): asked for once per request,
// before its first placement, so a render's time is paid once and never after placement; what
// placement then predicts the computing engine holds is set beside what the engine reported.

// tokenizePrompt replaces the prompt's word blocks by the keys of its token blocks when its
// model's source gives its tokens; on the estimate otherwise (the source counted why).
func (s *requestSupervisor) tokenizePrompt(f *placement.Snapshot) {
	engine := renderEngine(f, s.x.Body.Model, s.fingerprint)
	b, ok := s.env.tokens.PromptOf(s.x.Context(), s.x.Body, f.Parent(s.x.Body.Model), engine)
	if !ok {
		return
	}
	p := &s.prompt
	p.Blocks, p.Tokens, p.Words, p.PerBlock, p.Tokenized = b.Keys, b.Tokens, b.Tokens, b.BlockSize, true
}

// renderEngine names, when called, the base URL of one of model's engines still in the fleet f,
// the one spread picks among them ("" when none): where a render without render_url goes.
func renderEngine(f *placement.Snapshot, model string, spread uint64) func() string {
	return func() string {
		list := slices.Concat(f.Candidates(fault.PhaseDecode, model), f.Candidates(fault.PhasePrefill, model)) // a copy: the lists are shared
		list = slices.DeleteFunc(list, func(v *placement.Engine) bool { return v.Removed.Load() || v.Client == nil })
		if len(list) == 0 {
			return ""
		}
		return list[int(spread%uint64(len(list)))].Client.BaseURL()
	}
}

// CountTokens counts body's prompt tokens with its model's tokenizer (the Messages API's
// count_tokens); tokenize.ErrNoTokenizer when the model's source is the estimate.
func (r *Router) CountTokens(ctx context.Context, body *wire.ClientBody) (int, error) {
	return r.env.tokens.Count(ctx, body, renderEngine(r.fleet.Load(), body.Model, r.countSpread.Add(1)))
}

// cachedPrediction is the prompt tokens an engine matching match leading blocks is predicted
// to have cached: for token blocks, the blocks' tokens, as vLLM counts them (never the
// prompt's last token, which is always computed); for word blocks, the estimate's share.
func (s *requestSupervisor) cachedPrediction(ask *placement.AttemptAsk, match int) int {
	p := &s.prompt
	if p.Tokenized && p.PerBlock > 0 {
		return min(match, max(p.Tokens-1, 0)/p.PerBlock) * p.PerBlock
	}
	return p.Tokens - ask.Uncached(match)
}

// reportPrediction records how far the prediction was from the engine's cached_tokens, for a
// request an engine served with a prompt placement read.
func (s *requestSupervisor) reportPrediction(line *accessLine) {
	if s.outcome != outcomeSuccess || s.x.Body.Endpoint.Passthrough() || s.consumer == nil {
		return
	}
	kind := "estimate"
	if s.prompt.Tokenized {
		kind = "tokens"
	}
	s.env.metrics.CachedTokensError(kind, s.predictedCached, s.end.CachedTokens)
	if line != nil {
		line.PredictedCached, line.PromptBlocks = s.predictedCached, kind
	}
}
