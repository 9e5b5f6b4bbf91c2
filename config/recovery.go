package config

// Recovery holds retries, the retry budget, breakers and probing.
type Recovery struct {
	MaxAttempts        int         `yaml:"max_attempts"`
	RetryBudget        RetryBudget `yaml:"retry_budget"`
	EjectAfter         int         `yaml:"eject_after"`
	FailureQuarantineS Seconds     `yaml:"failure_quarantine_s"`
	ProbeIntervalS     Seconds     `yaml:"probe_interval_s"`
	ProbeMaxIntervalS  Seconds     `yaml:"probe_max_interval_s"`
	// BlameWindowS is how far back failures are compared to tell a request's failure or a
	// producer's bad handoffs from an engine's own, and how long such a failure waits for the
	// evidence (the engine committing other requests) before it counts against the engine.
	BlameWindowS Seconds `yaml:"blame_window_s"`
	// Backpressure bounds how long an engine that only answers 429/503 keeps its placements.
	Backpressure Backpressure `yaml:"backpressure"`
	// Readmission is what readmits an ejected engine: ReadmissionProbe (a real inference
	// probe, the default) or ReadmissionHealth (a successful GET /health; development only).
	Readmission string `yaml:"readmission"`
}

// Backpressure is recovery.backpressure: an engine that answered nothing but 429/503 for
// longer than BoundS is passed over by placement for its Retry-After (at most MaxPassS), or for
// PassS when it sent none. Backpressure never counts against the breaker.
type Backpressure struct {
	BoundS   Seconds `yaml:"bound_s"`
	PassS    Seconds `yaml:"pass_s"`
	MaxPassS Seconds `yaml:"max_pass_s"`
}

// Readmission modes.
const (
	ReadmissionProbe  = "probe"
	ReadmissionHealth = "health"
)

// RetryBudget lets retries add at most Ratio of the requests seen in the last WindowS seconds,
// plus MinPerS retries per second that are always allowed (Finagle's retry budget).
type RetryBudget struct {
	Ratio   float64 `yaml:"ratio"`
	MinPerS float64 `yaml:"min_per_s"`
	WindowS Seconds `yaml:"window_s"`
}

// ReadmitByHealth says an ejected engine is readmitted by a health check (recovery.readmission:
// health), not by an inference probe.
func (r Recovery) ReadmitByHealth() bool { return r.Readmission == ReadmissionHealth }

func defaultRecovery() Recovery {
	return Recovery{
		MaxAttempts:       1,
		RetryBudget:       RetryBudget{Ratio: 0.1, MinPerS: 5, WindowS: 10},
		EjectAfter:        3,
		ProbeIntervalS:    5,
		ProbeMaxIntervalS: 60,
		BlameWindowS:      5,
		Backpressure:      Backpressure{BoundS: 1, PassS: 2, MaxPassS: 30},
		Readmission:       ReadmissionProbe,
	}
}

func (r Recovery) check(ck *checker) {
	if r.MaxAttempts < 1 || r.MaxAttempts > 10 {
		ck.fail("recovery.max_attempts", "must be between 1 (no retries) and 10, got %d", r.MaxAttempts)
	}
	r.RetryBudget.check(ck)
	if r.EjectAfter < 1 {
		ck.fail("recovery.eject_after", "must be 1 or more consecutive stream failures, got %d", r.EjectAfter)
	}
	ck.nonNegative("recovery.failure_quarantine_s", r.FailureQuarantineS)
	ck.positive("recovery.probe_interval_s", r.ProbeIntervalS)
	if r.ProbeMaxIntervalS < r.ProbeIntervalS {
		ck.fail("recovery.probe_max_interval_s", "must be at least recovery.probe_interval_s (%v), got %v",
			float64(r.ProbeIntervalS), float64(r.ProbeMaxIntervalS))
	}
	ck.oneOf("recovery.readmission", r.Readmission, ReadmissionProbe, ReadmissionHealth)
	ck.positive("recovery.blame_window_s", r.BlameWindowS)
	r.Backpressure.check(ck)
}

func (b RetryBudget) check(ck *checker) {
	if !finite(b.Ratio) || b.Ratio < 0 || b.Ratio > 1 {
		ck.fail("recovery.retry_budget.ratio", "must be a fraction between 0 and 1, got %v", b.Ratio)
	}
	if !finite(b.MinPerS) || b.MinPerS < 0 || b.MinPerS > 1e6 {
		ck.fail("recovery.retry_budget.min_per_s", "must be from 0 to 1000000 retries per second, got %v", b.MinPerS)
	}
	ck.positive("recovery.retry_budget.window_s", b.WindowS)
}

func (b Backpressure) check(ck *checker) {
	ck.nonNegative("recovery.backpressure.bound_s", b.BoundS)
	ck.positive("recovery.backpressure.pass_s", b.PassS)
	if b.MaxPassS < b.PassS {
		ck.fail("recovery.backpressure.max_pass_s", "must be at least recovery.backpressure.pass_s (%v), got %v",
			float64(b.PassS), float64(b.MaxPassS))
	}
}
