package sim

import "time"

// Calibration is a published vLLM measurement the capacity model's step times are fitted
// to, and the figures taken from it (bench/sim/README.md, "Calibration", says how and what
// the fit leaves out).
type Calibration struct {
	// What was measured: the model, the GPU, the vLLM version and the request shape.
	Model, GPU, Engine, Shape string
	// Title and URL name the publication.
	Title, URL string
	// ITL is the fitted step floor and ITLPerSeq its slope per sequence in the batch
	// (inter-token latency ≈ ITL + ITLPerSeq × batch); PrefillPerToken is the time to the
	// first token of a lone request, less one decode step, per prompt token.
	ITL, ITLPerSeq, PrefillPerToken time.Duration
}

// Calibrated is the capacity model's default calibration: a concurrency sweep of
// Qwen2.5-0.5B-Instruct on one NVIDIA L4 with vLLM 0.23.0 (V1 engine), 256-token prompts
// and 128-token outputs. Its median inter-token latencies at 1, 2, 4, 8, 16 and 32
// concurrent requests were 5.1, 5.2, 5.3, 5.5, 6.0 and 7.1 ms; a least-squares line
// through them is 5.03 ms + 63.7 µs per sequence (no point off by more than 0.06 ms). Its
// median time to first token alone was 27.0 ms: less one 5.1 ms step, 21.9 ms for 256
// prompt tokens, 85.5 µs each.
var Calibrated = Calibration{
	Model: "Qwen/Qwen2.5-0.5B-Instruct (BF16)", GPU: "1× NVIDIA L4 (23 GB)", Engine: "vLLM v0.23.0, V1 engine",
	Shape: "256-token prompts, 128-token outputs (--ignore-eos), closed loop at 1–32 concurrent requests",
	Title: "serving/raw-vllm: a concurrency sweep measuring latency (TTFT / ITL / end-to-end) and throughput",
	URL:   "https://ai.wmx.dev/benchmarks",
	ITL:   5 * time.Millisecond, ITLPerSeq: 64 * time.Microsecond, PrefillPerToken: 86 * time.Microsecond,
}

// Apply fills the capacity model's step times that o leaves at zero (ITL, ITLPerSeq,
// PrefillPerToken) from c, and returns the result; fields already set are kept.
func (c Calibration) Apply(o Options) Options {
	if o.ITL == 0 {
		o.ITL = c.ITL
	}
	if o.ITLPerSeq == 0 {
		o.ITLPerSeq = c.ITLPerSeq
	}
	if o.PrefillPerToken == 0 {
		o.PrefillPerToken = c.PrefillPerToken
	}
	return o
}

// StepTime is the capacity model's duration of one step with seqs sequences and
// prefillTokens prompt tokens computed in it.
func (o Options) StepTime(seqs, prefillTokens int) time.Duration {
	return o.ITL + time.Duration(seqs)*o.ITLPerSeq + time.Duration(prefillTokens)*o.PrefillPerToken
}
