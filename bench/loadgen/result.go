package loadgen

import (
	"sort"
	"sync"
	"time"
)

// Outcome is how one request ended, as the generator saw it.
type Outcome struct {
	// OK: a complete stream ending in [DONE] with every token asked for, in order.
	OK bool
	// Error classifies a request that ended in a proper error outcome ("" otherwise), e.g.
	// "http 502 engine_status" or "sse_error closed_early".
	Error string
	// Violation names a breach of the one-outcome contract ("" otherwise): no response at
	// all, a stream cut without [DONE] or an error event, both, or a token out of place.
	Violation string
	// Started is when the request started (its scheduled time in open loop).
	Started time.Time
	// TTFT, FirstByte and Total are from Started; zero when the event never happened.
	TTFT, FirstByte, Total time.Duration
	// Tokens counts token events received.
	Tokens int
	// Attempts is the router's x-narwhal-attempts, when it exposes it (0: unknown).
	Attempts int
	// Lag is how late an open-loop request started after its scheduled time.
	Lag time.Duration
	// Released: the generator itself hung up on a healthy stream (end of a hold phase).
	Released bool
	// Flow names the request's flow ("" in a phase without flows).
	Flow string
}

// Result is what one phase (or several merged) measured.
type Result struct {
	Phase string `json:"phase"`
	Arm   Arm    `json:"arm"`
	// Elapsed is from the phase's start until its last request ended.
	Elapsed time.Duration `json:"elapsed"`
	// Sent counts requests started; OK those that succeeded.
	Sent int `json:"sent"`
	OK   int `json:"ok"`
	// Tokens counts token events received by every request.
	Tokens int64 `json:"tokens"`
	// Errors and Violations count outcomes by class.
	Errors     map[string]int `json:"errors,omitempty"`
	Violations map[string]int `json:"violations,omitempty"`
	// Dropped counts open-loop requests never started because MaxInFlight was reached.
	Dropped int `json:"dropped,omitempty"`
	// Released counts healthy streams the generator hung up on (end of a hold phase).
	Released int `json:"released,omitempty"`
	// Attempts counts routed requests by the attempts the router reports.
	Attempts map[int]int `json:"attempts,omitempty"`
	// Latency samples in microseconds: TTFT and FirstByte of every request that got that far,
	// Total of successful ones. Lag is the open-loop start lag of every request.
	TTFT      []int64 `json:"ttft_us,omitempty"`
	FirstByte []int64 `json:"first_byte_us,omitempty"`
	Total     []int64 `json:"total_us,omitempty"`
	Lag       []int64 `json:"lag_us,omitempty"`
	// Faults tallies injected faults (fault phases only).
	Faults *FaultTally `json:"faults,omitempty"`
	// Streaming is how many hold-phase streams had their first token at once, and
	// StreamingAfter how long after the phase started that was.
	Streaming      int           `json:"streaming,omitempty"`
	StreamingAfter time.Duration `json:"streaming_after,omitempty"`
	// Flows are the phase's requests again, split by flow (phases with flows only): each
	// flow's counts and samples, its Elapsed the phase's.
	Flows map[string]*Result `json:"flows,omitempty"`
}

// FaultTally counts injected faults per spec: how many were injected and how many an engine
// actually applied (the rest were cleared unused at the phase's end).
type FaultTally struct {
	Injected    map[string]int  `json:"injected"`
	Consumed    map[string]int  `json:"consumed"`
	AfterCommit map[string]bool `json:"after_commit"`
	// Failed counts injections the simulator refused or that could not be sent.
	Failed int `json:"failed,omitempty"`
}

// ErrorCount is the number of requests that ended in an error outcome.
func (r *Result) ErrorCount() int { return sumValues(r.Errors) }

// ViolationCount is the number of requests that breached the one-outcome contract.
func (r *Result) ViolationCount() int { return sumValues(r.Violations) }

// Rate is successful requests per second of Elapsed.
func (r *Result) Rate() float64 {
	if r.Elapsed <= 0 {
		return 0
	}
	return float64(r.OK) / r.Elapsed.Seconds()
}

func sumValues[K comparable](m map[K]int) int {
	n := 0
	for _, v := range m {
		n += v
	}
	return n
}

// Merge adds o's counts and samples to r; Elapsed adds up (windows are disjoint).
func (r *Result) Merge(o *Result) {
	if r.Arm == "" {
		r.Arm = o.Arm
	}
	r.Elapsed += o.Elapsed
	r.Sent += o.Sent
	r.OK += o.OK
	r.Tokens += o.Tokens
	r.Dropped += o.Dropped
	r.Released += o.Released
	r.Errors = addCounts(r.Errors, o.Errors)
	r.Violations = addCounts(r.Violations, o.Violations)
	r.Attempts = addCounts(r.Attempts, o.Attempts)
	r.TTFT = append(r.TTFT, o.TTFT...)
	r.FirstByte = append(r.FirstByte, o.FirstByte...)
	r.Total = append(r.Total, o.Total...)
	r.Lag = append(r.Lag, o.Lag...)
	if o.Faults != nil {
		if r.Faults == nil {
			r.Faults = &FaultTally{}
		}
		r.Faults.Injected = addCounts(r.Faults.Injected, o.Faults.Injected)
		r.Faults.Consumed = addCounts(r.Faults.Consumed, o.Faults.Consumed)
		for k, v := range o.Faults.AfterCommit {
			if r.Faults.AfterCommit == nil {
				r.Faults.AfterCommit = map[string]bool{}
			}
			r.Faults.AfterCommit[k] = v
		}
		r.Faults.Failed += o.Faults.Failed
	}
	for name, f := range o.Flows {
		r.flow(name).Merge(f)
	}
}

// flow is the named flow's part of r, made on first use.
func (r *Result) flow(name string) *Result {
	f, ok := r.Flows[name]
	if !ok {
		if r.Flows == nil {
			r.Flows = map[string]*Result{}
		}
		f = &Result{Phase: r.Phase, Arm: r.Arm}
		r.Flows[name] = f
	}
	return f
}

func addCounts[K comparable](dst, src map[K]int) map[K]int {
	if len(src) == 0 {
		return dst
	}
	if dst == nil {
		dst = make(map[K]int, len(src))
	}
	for k, v := range src {
		dst[k] += v
	}
	return dst
}

// SortedKeys returns m's keys ordered by count, largest first, then by name.
func SortedKeys(m map[string]int) []string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	sort.Slice(keys, func(i, j int) bool {
		if m[keys[i]] != m[keys[j]] {
			return m[keys[i]] > m[keys[j]]
		}
		return keys[i] < keys[j]
	})
	return keys
}

// recorder collects outcomes from many goroutines into a Result.
type recorder struct {
	mu  sync.Mutex
	res Result
}

func newRecorder(p Phase) *recorder {
	return &recorder{res: Result{Phase: p.Name, Arm: p.Arm}}
}

func (rec *recorder) add(o Outcome) {
	rec.mu.Lock()
	defer rec.mu.Unlock()
	rec.res.record(o)
	if o.Flow != "" {
		// Every started request is recorded once, so a flow's Sent is its outcomes.
		f := rec.res.flow(o.Flow)
		f.Sent++
		f.record(o)
	}
}

// record counts one outcome in r (but not in Sent).
func (r *Result) record(o Outcome) {
	r.Tokens += int64(o.Tokens)
	if o.TTFT > 0 {
		r.TTFT = append(r.TTFT, o.TTFT.Microseconds())
	}
	if o.FirstByte > 0 {
		r.FirstByte = append(r.FirstByte, o.FirstByte.Microseconds())
	}
	if o.Lag > 0 {
		r.Lag = append(r.Lag, o.Lag.Microseconds())
	}
	if o.Attempts > 0 {
		if r.Attempts == nil {
			r.Attempts = map[int]int{}
		}
		r.Attempts[o.Attempts]++
	}
	switch {
	case o.Released:
		r.Released++
	case o.Violation != "":
		if r.Violations == nil {
			r.Violations = map[string]int{}
		}
		r.Violations[o.Violation]++
	case o.OK:
		r.OK++
		r.Total = append(r.Total, o.Total.Microseconds())
	default:
		if r.Errors == nil {
			r.Errors = map[string]int{}
		}
		r.Errors[o.Error]++
	}
}

func (rec *recorder) sent() {
	rec.mu.Lock()
	rec.res.Sent++
	rec.mu.Unlock()
}

func (rec *recorder) dropped() {
	rec.mu.Lock()
	rec.res.Dropped++
	rec.mu.Unlock()
}

func (rec *recorder) result() Result {
	rec.mu.Lock()
	defer rec.mu.Unlock()
	return rec.res
}

// setElapsed sets the phase's Elapsed on r and on each of its flows.
func (r *Result) setElapsed(d time.Duration) {
	r.Elapsed = d
	for _, f := range r.Flows {
		f.Elapsed = d
	}
}
