package trace

import (
	"fmt"
	"math"
	"strconv"
	"strings"
	"sync"
	"time"

	json "github.com/goccy/go-json"

	"github.com/narwhal-router/narwhal/bench/sim/tokenizer"
)

// Scale fits a trace to the machine that replays it. The zero value replays the trace
// as written (real time, real lengths). It travels as JSON (to a load generator running
// in its own process) under the tags below.
type Scale struct {
	// TimeScale multiplies arrival times: 0.1 replays the trace ten times faster.
	// 0 means 1.
	TimeScale float64 `json:"time_scale,omitempty"`
	// BlockTokens is how many prompt tokens stand for one 512-token trace block; the
	// length scale is BlockTokens / 512 (64 shrinks prompts eightfold). 0 means 512.
	// Make it a multiple of the engines' KV block size so that trace blocks and
	// prefix-cache blocks line up.
	BlockTokens int `json:"block_tokens,omitempty"`
	// OutputScale multiplies output lengths; 0 means the length scale.
	OutputScale float64 `json:"output_scale,omitempty"`
	// MaxInputTokens and MaxOutputTokens cap the scaled lengths (0: no cap). A capped
	// prompt keeps its leading blocks.
	MaxInputTokens  int `json:"max_input_tokens,omitempty"`
	MaxOutputTokens int `json:"max_output_tokens,omitempty"`
	// Skip drops the first Skip records; Limit keeps at most Limit of the rest (0: all).
	// Arrival times count from the first record kept.
	Skip  int `json:"skip,omitempty"`
	Limit int `json:"limit,omitempty"`
}

func (s Scale) normalized() (Scale, error) {
	if s.TimeScale == 0 {
		s.TimeScale = 1
	}
	if s.BlockTokens == 0 {
		s.BlockTokens = TraceBlockTokens
	}
	if s.OutputScale == 0 {
		s.OutputScale = s.lengthScale()
	}
	switch {
	case s.TimeScale < 0 || math.IsNaN(s.TimeScale) || math.IsInf(s.TimeScale, 0):
		return s, fmt.Errorf("trace scale: time scale %v: want a positive number", s.TimeScale)
	case s.BlockTokens < 1:
		return s, fmt.Errorf("trace scale: block tokens %d: want at least 1", s.BlockTokens)
	case s.OutputScale < 0 || math.IsNaN(s.OutputScale) || math.IsInf(s.OutputScale, 0):
		return s, fmt.Errorf("trace scale: output scale %v: want a positive number", s.OutputScale)
	case s.MaxInputTokens < 0, s.MaxOutputTokens < 0, s.Skip < 0, s.Limit < 0:
		return s, fmt.Errorf("trace scale: caps, skip and limit must not be negative (input cap %d, output cap %d, skip %d, limit %d)",
			s.MaxInputTokens, s.MaxOutputTokens, s.Skip, s.Limit)
	}
	return s, nil
}

func (s Scale) lengthScale() float64 { return float64(s.BlockTokens) / TraceBlockTokens }

// String describes the scaling for a benchmark report.
func (s Scale) String() string {
	s, err := s.normalized()
	if err != nil {
		return err.Error()
	}
	var b strings.Builder
	fmt.Fprintf(&b, "time ×%g", s.TimeScale)
	if s.TimeScale != 1 {
		fmt.Fprintf(&b, " (%g× faster)", 1/s.TimeScale)
	}
	fmt.Fprintf(&b, ", prompt lengths ×%g (a %d-token trace block = %d tokens), output lengths ×%g",
		s.lengthScale(), TraceBlockTokens, s.BlockTokens, s.OutputScale)
	if s.MaxInputTokens > 0 {
		fmt.Fprintf(&b, ", prompts capped at %d tokens", s.MaxInputTokens)
	}
	if s.MaxOutputTokens > 0 {
		fmt.Fprintf(&b, ", outputs capped at %d tokens", s.MaxOutputTokens)
	}
	if s.Skip > 0 || s.Limit > 0 {
		fmt.Fprintf(&b, ", records from #%d", s.Skip)
		if s.Limit > 0 {
			fmt.Fprintf(&b, ", at most %d", s.Limit)
		}
	}
	return b.String()
}

// Request is one scaled trace record, ready to send.
type Request struct {
	// Index is the record's position in the trace (0-based).
	Index int
	// At is when to send it, from the start of the replay.
	At time.Duration
	// Prompt is InputTokens words; its first k·BlockTokens words depend only on the
	// first k hash ids.
	Prompt       string
	InputTokens  int
	OutputTokens int
	// HashIDs are the trace blocks the prompt covers (a capped prompt covers fewer).
	HashIDs []int
}

// Replay is a scaled trace.
type Replay struct {
	Scale    Scale // normalized
	Requests []Request
}

// NewReplay scales recs and builds every request's prompt.
func NewReplay(recs []Record, s Scale) (*Replay, error) {
	s, err := s.normalized()
	if err != nil {
		return nil, err
	}
	if s.Skip >= len(recs) {
		return nil, fmt.Errorf("trace scale: skip %d leaves none of %d records", s.Skip, len(recs))
	}
	recs = recs[s.Skip:]
	if s.Limit > 0 && s.Limit < len(recs) {
		recs = recs[:s.Limit]
	}
	r := &Replay{Scale: s, Requests: make([]Request, len(recs))}
	t0 := recs[0].Timestamp
	for i, rec := range recs {
		r.Requests[i] = s.request(s.Skip+i, rec, t0)
	}
	return r, nil
}

func (s Scale) request(index int, rec Record, t0 int64) Request {
	in := max(int(math.Round(float64(rec.InputLength)*s.lengthScale())), 1)
	if s.MaxInputTokens > 0 {
		in = min(in, s.MaxInputTokens)
	}
	out := max(int(math.Round(float64(rec.OutputLength)*s.OutputScale)), 1)
	if s.MaxOutputTokens > 0 {
		out = min(out, s.MaxOutputTokens)
	}
	blocks := min((in+s.BlockTokens-1)/s.BlockTokens, len(rec.HashIDs))
	ms := float64(rec.Timestamp-t0) * s.TimeScale
	return Request{
		Index:        index,
		At:           time.Duration(ms * float64(time.Millisecond)),
		Prompt:       Prompt(rec.HashIDs[:blocks], s.BlockTokens, in),
		InputTokens:  in,
		OutputTokens: out,
		HashIDs:      rec.HashIDs[:blocks],
	}
}

// Prompt returns n words that are n tokens for the simulator's default tokenizer: block after
// block of blockTokens words each, block i's words depending only on hashIDs[i] and the
// position in the block. A block's first words spell its hash id in base len(words), so two
// blocks of different ids differ; the rest cycle through the words from an offset the id
// gives.
func Prompt(hashIDs []int, blockTokens, n int) string {
	words := promptWords()
	base := len(words)
	var b strings.Builder
	b.Grow(n * 8)
	written := 0
	word := func(w string) {
		if written > 0 {
			b.WriteByte(' ')
		}
		b.WriteString(w)
		written++
	}
	for _, h := range hashIDs {
		digits := h
		for j := 0; j < blockTokens && written < n; j++ {
			if j < idDigits {
				word(words[digits%base])
				digits /= base
				continue
			}
			word(words[(h+j)%base])
		}
	}
	// A prompt longer than its hash ids cover (never in a well-formed trace) is padded with
	// words from the end of the list, which blocks use only by chance.
	for i := 0; written < n; i++ {
		word(words[base-1-i%base])
	}
	return b.String()
}

// idDigits is how many words of a block spell its hash id: enough for every id below
// len(words)^idDigits (about 10^8 with the default tokenizer's ~500 such words).
const idDigits = 3

var (
	wordsOnce sync.Once
	words     []string
)

func promptWords() []string {
	wordsOnce.Do(func() { words = tokenizer.Default().SingleTokenWords() })
	return words
}

// Summary describes a replay for a report.
type Summary struct {
	Requests int
	// Span is the time from the first arrival to the last.
	Span time.Duration
	// MeanInput, MaxInput, MeanOutput are in scaled tokens.
	MeanInput, MeanOutput float64
	MaxInput              int
	// BlockReuse is the share of the prompts' trace blocks whose hash id an earlier
	// request of the replay already used: the sharing a prefix cache can exploit.
	BlockReuse float64
}

// Summary computes the replay's figures.
func (r *Replay) Summary() Summary {
	var s Summary
	seen := make(map[int]bool)
	var in, out, blocks, reused int
	for _, q := range r.Requests {
		in += q.InputTokens
		out += q.OutputTokens
		s.MaxInput = max(s.MaxInput, q.InputTokens)
		for _, h := range q.HashIDs {
			blocks++
			if seen[h] {
				reused++
			}
			seen[h] = true
		}
	}
	s.Requests = len(r.Requests)
	if s.Requests > 0 {
		s.Span = r.Requests[s.Requests-1].At - r.Requests[0].At
		s.MeanInput = float64(in) / float64(s.Requests)
		s.MeanOutput = float64(out) / float64(s.Requests)
	}
	if blocks > 0 {
		s.BlockReuse = float64(reused) / float64(blocks)
	}
	return s
}

// String prints the summary on one line.
func (s Summary) String() string {
	return fmt.Sprintf("%d requests over %v, mean prompt %.0f tokens (max %d), mean output %.0f tokens, %.1f%% of blocks reused",
		s.Requests, s.Span.Round(time.Millisecond), s.MeanInput, s.MaxInput, s.MeanOutput, 100*s.BlockReuse)
}

// CompletionsBody returns a streaming /v1/completions body for q (usage included,
// max_tokens the scaled output length).
func (q Request) CompletionsBody(model string) []byte {
	b := make([]byte, 0, len(q.Prompt)+128)
	name, _ := json.Marshal(model) // a string always encodes
	b = append(b, `{"model":`...)
	b = append(b, name...)
	b = append(b, `,"prompt":`...)
	b = strconv.AppendQuote(b, q.Prompt) // the prompt is ASCII: Go and JSON quoting agree
	b = append(b, `,"max_tokens":`...)
	b = strconv.AppendInt(b, int64(q.OutputTokens), 10)
	b = append(b, `,"stream":true,"stream_options":{"include_usage":true}}`...)
	return b
}

// ChatBody returns a streaming /v1/chat/completions body for q: the prompt as one user
// message, usage included, max_completion_tokens the scaled output length.
func (q Request) ChatBody(model string) []byte {
	name, _ := json.Marshal(model)
	b := make([]byte, 0, len(q.Prompt)+160)
	b = append(b, `{"model":`...)
	b = append(b, name...)
	b = append(b, `,"messages":[{"role":"user","content":`...)
	b = strconv.AppendQuote(b, q.Prompt) // the prompt is ASCII: Go and JSON quoting agree
	b = append(b, `}],"max_completion_tokens":`...)
	b = strconv.AppendInt(b, int64(q.OutputTokens), 10)
	b = append(b, `,"stream":true,"stream_options":{"include_usage":true}}`...)
	return b
}

// WithoutSharing returns recs with the same arrivals and lengths but hash ids no two
// records share: the control workload, where a prefix cache can gain nothing.
func WithoutSharing(recs []Record) []Record {
	out := make([]Record, len(recs))
	next := 0
	for i, r := range recs {
		ids := make([]int, len(r.HashIDs))
		for j := range ids {
			ids[j] = next
			next++
		}
		r.HashIDs = ids
		out[i] = r
	}
	return out
}
