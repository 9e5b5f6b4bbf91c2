package telemetry

import (
	"time"

	"github.com/uber-go/tally/v4"
)

// PromptTokens counts a prompt's tokenization for placement by model, source (local, render)
// and result (ok, or why the request was placed on the estimate: timeout, error, status,
// decode, unsupported, no_engine), and records the time it took before placement.
func (m *Metrics) PromptTokens(model, source, result string, d time.Duration) {
	m.counter("prompt_tokenization", "model", m.modelLabel(model), "source", source, "result", result).Inc(1)
	m.timer("prompt_tokenization_s", "source", source).Record(d)
}

// CachedTokensError records, per request served, how far the cached tokens placement
// predicted on the chosen engine were from the engine's reported cached_tokens (predicted
// minus reported: positive when the router claimed more than the engine had), by the kind of
// prediction (tokens: the prompt's token blocks; estimate: its word blocks).
//
// The histogram is of the error's size in tokens; its direction is the tag: over (the router
// claimed more, or as much) or under.
func (m *Metrics) CachedTokensError(kind string, predicted, reported int) {
	direction := "over"
	if predicted < reported {
		direction = "under"
	}
	h, ok := m.errorHists.Load(kind + "/" + direction)
	if !ok {
		h, _ = m.errorHists.LoadOrStore(kind+"/"+direction, m.scope.Tagged(map[string]string{"kind": kind, "direction": direction}).
			Histogram("cached_tokens_error", errorBuckets))
	}
	h.(tally.Histogram).RecordValue(float64(abs(predicted - reported)))
}

// errorBuckets are 0, then powers of two to 64k tokens.
var errorBuckets = append(tally.ValueBuckets{0}, tally.MustMakeExponentialValueBuckets(1, 2, 17)...)

func abs(n int) int {
	if n < 0 {
		return -n
	}
	return n
}
