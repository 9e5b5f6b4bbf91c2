package loadgen

import (
	"errors"
	"fmt"
	"math/rand/v2"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	json "github.com/goccy/go-json"
)

// Generator runs phases against one fleet and one router.
type Generator struct {
	setup  Setup
	direct *directArm
	mu     sync.Mutex
	routed map[armKey]*routedArm // by address and guard: the guard is the client's read deadline
}

// NewGenerator prepares both arms.
func NewGenerator(s Setup) (*Generator, error) {
	if s.MaxConns <= 0 {
		s.MaxConns = 20000
	}
	if s.Model == "" {
		return nil, errors.New("setup: no model")
	}
	d, err := newDirectArm(s)
	if err != nil {
		return nil, err
	}
	return &Generator{setup: s, direct: d, routed: map[armKey]*routedArm{}}, nil
}

type armKey struct {
	addr  string
	guard time.Duration
}

// routedArm is the HTTP client arm for one proxy's address (the router, the peer proxy, the
// baseline router).
func (g *Generator) routedArm(addr string, guard time.Duration) *routedArm {
	g.mu.Lock()
	defer g.mu.Unlock()
	k := armKey{addr, guard}
	r, ok := g.routed[k]
	if !ok {
		r = newRoutedArm(addr, g.setup.MaxConns, guard)
		g.routed[k] = r
	}
	return r
}

// Event is something a running phase reports before its result (hold phases: all streams
// are streaming).
type Event struct {
	Name      string        `json:"name"`
	Streaming int           `json:"streaming"`
	After     time.Duration `json:"after"`
}

// Run drives one phase to its end and returns what it measured.
func (g *Generator) Run(p Phase, events func(Event)) (Result, error) {
	if err := validate(p); err != nil {
		return Result{}, err
	}
	if p.Guard <= 0 {
		p.Guard = 30 * time.Second
	}
	body, err := chatBody(g.setup.Model, p.PromptWords, p.MaxTokens)
	if err != nil {
		return Result{}, err
	}
	var inj *injector
	if p.Faults != nil && p.Faults.Rate > 0 {
		if inj, err = newInjector(p.Faults, g.setup.Engines); err != nil {
			return Result{}, err
		}
	}
	rec := newRecorder(p)
	do := g.requester(p, body, inj)
	start := time.Now()
	var streaming int
	var streamingAfter time.Duration
	switch p.Mode {
	case Closed:
		runClosed(p, rec, do)
	case Open:
		runOpen(p, rec, do)
	case Hold:
		streaming, streamingAfter = g.runHold(p, body, rec, events)
	}
	res := rec.result()
	res.setElapsed(time.Since(start))
	res.Streaming, res.StreamingAfter = streaming, streamingAfter
	if inj != nil {
		if res.Faults, err = inj.finish(); err != nil {
			return res, err
		}
	}
	return res, nil
}

func validate(p Phase) error {
	switch p.Arm {
	case Direct, Routed, Peer, Baseline:
	default:
		return fmt.Errorf("phase %s: arm %q (want direct, routed, peer or baseline)", p.Name, p.Arm)
	}
	if p.MaxTokens < 1 {
		return fmt.Errorf("phase %s: max_tokens must be 1 or more", p.Name)
	}
	switch p.Mode {
	case Closed:
		if p.Concurrency < 1 || p.Duration <= 0 {
			return fmt.Errorf("phase %s: closed loop needs a concurrency and a duration", p.Name)
		}
	case Open:
		if p.Rate <= 0 || p.Duration <= 0 {
			return fmt.Errorf("phase %s: open loop needs a rate and a duration", p.Name)
		}
	case Hold:
		if p.Arm != Routed || p.Streams < 1 || p.Rate <= 0 {
			return fmt.Errorf("phase %s: hold needs the routed arm, streams and an opening rate", p.Name)
		}
	default:
		return fmt.Errorf("phase %s: mode %q (want closed, open or hold)", p.Name, p.Mode)
	}
	if p.Faults != nil && p.Arm != Routed {
		return fmt.Errorf("phase %s: faults are injected in routed phases only", p.Name)
	}
	if len(p.Flows) > 0 {
		if p.Arm == Direct || p.Mode == Hold {
			return fmt.Errorf("phase %s: flows need a closed or open phase on an arm with a router", p.Name)
		}
		if _, err := newFlowPicker(p.Flows); err != nil {
			return fmt.Errorf("phase %s: %w", p.Name, err)
		}
	}
	return nil
}

// requester returns the function that runs one request of the phase on its arm.
func (g *Generator) requester(p Phase, body []byte, inj *injector) func(start time.Time) Outcome {
	if p.Arm == Direct {
		return func(start time.Time) Outcome { return g.direct.do(start, body, p.MaxTokens, p.Guard) }
	}
	// The peer and baseline arms are read exactly like the routed one, at their own address;
	// validate keeps faults to the routed arm, so inj is nil for them.
	addr := map[Arm]string{Routed: g.setup.Router, Peer: g.setup.Peer, Baseline: g.setup.Baseline}[p.Arm]
	if addr == "" {
		missing := fmt.Sprintf("no %s arm in this rig", p.Arm)
		return func(start time.Time) Outcome { return Outcome{Started: start, Error: missing} }
	}
	r := g.routedArm(addr, p.Guard)
	var picker *flowPicker
	if len(p.Flows) > 0 {
		picker, _ = newFlowPicker(p.Flows) // validate has checked the flows
	}
	return func(start time.Time) Outcome {
		if inj != nil {
			inj.maybe()
		}
		if picker == nil {
			return r.do(start, body, p.MaxTokens, nil, nil)
		}
		f := &p.Flows[picker.pick(rand.Float64())]
		o := r.do(start, body, p.MaxTokens, nil, f)
		o.Flow = f.Name
		return o
	}
}

// runClosed keeps Concurrency requests in flight until Duration has passed, then drains.
func runClosed(p Phase, rec *recorder, do func(time.Time) Outcome) {
	end := time.Now().Add(p.Duration)
	var wg sync.WaitGroup
	for range p.Concurrency {
		wg.Go(func() {
			for {
				start := time.Now()
				if !start.Before(end) {
					return
				}
				rec.sent()
				rec.add(do(start))
			}
		})
	}
	wg.Wait()
}

// runOpen starts requests at Rate per second for Duration, each on its own goroutine, and
// times each from its scheduled start, then drains.
func runOpen(p Phase, rec *recorder, do func(time.Time) Outcome) {
	limit := p.MaxInFlight
	if limit <= 0 {
		limit = 20000
	}
	var inFlight atomic.Int64
	var wg sync.WaitGroup
	schedule(p.Rate, p.Duration, -1, func(sched time.Time) {
		if inFlight.Load() >= int64(limit) {
			rec.dropped()
			return
		}
		inFlight.Add(1)
		rec.sent()
		wg.Go(func() {
			defer inFlight.Add(-1)
			lag := time.Since(sched)
			o := do(sched)
			o.Lag = max(lag, time.Microsecond)
			rec.add(o)
		})
	})
	wg.Wait()
}

// schedule calls start at t0 + i/rate for i = 0, 1, … while within d (d ≤ 0: no bound) and
// fewer than n (n < 0: no bound). Calls that fell behind are made at once.
func schedule(rate float64, d time.Duration, n int, start func(sched time.Time)) {
	t0 := time.Now()
	for i := 0; n < 0 || i < n; i++ {
		offset := time.Duration(float64(i) / rate * float64(time.Second))
		if d > 0 && offset >= d {
			return
		}
		sched := t0.Add(offset)
		if wait := time.Until(sched); wait > 0 {
			time.Sleep(wait)
		}
		start(sched)
	}
}

// runHold opens Streams routed streams at Rate per second, reports once they are all
// streaming at the same time (or the opening has clearly stalled), keeps them HoldFor (then
// hangs up on them) or lets them run, and waits for them all to end. It returns the most streams that were streaming at once and when that was reached.
func (g *Generator) runHold(p Phase, body []byte, rec *recorder, events func(Event)) (int, time.Duration) {
	r := g.routedArm(g.setup.Router, p.Guard)
	t0 := time.Now()
	var cur, peak atomic.Int64
	var peakAt atomic.Int64
	var once sync.Once
	var released atomic.Bool
	report := func() {
		once.Do(func() {
			events(Event{Name: "streaming", Streaming: int(peak.Load()), After: time.Duration(peakAt.Load())})
			if p.HoldFor > 0 {
				time.AfterFunc(p.HoldFor, func() { released.Store(true) })
			}
		})
	}
	firstToken := func() {
		n := cur.Add(1)
		for pk := peak.Load(); n > pk; pk = peak.Load() {
			if peak.CompareAndSwap(pk, n) {
				peakAt.Store(int64(time.Since(t0)))
				break
			}
		}
		if int(n) == p.Streams {
			report()
		}
	}
	ended := func() { cur.Add(-1) }
	h := &hooks{firstToken: firstToken, ended: ended, release: released.Load}
	// If the streams are not all up well after the opening should have finished, report
	// what there is rather than wait for ever.
	opening := time.Duration(float64(p.Streams) / p.Rate * float64(time.Second))
	stall := time.AfterFunc(opening+30*time.Second, report)
	defer stall.Stop()

	var wg sync.WaitGroup
	schedule(p.Rate, 0, p.Streams, func(sched time.Time) {
		rec.sent()
		wg.Go(func() { rec.add(r.do(sched, body, p.MaxTokens, h, nil)) })
	})
	wg.Wait()
	report()
	return int(peak.Load()), time.Duration(peakAt.Load())
}

// chatBody is the streaming chat request both arms send.
func chatBody(model string, promptWords, maxTokens int) ([]byte, error) {
	words := make([]string, max(promptWords, 1))
	for i := range words {
		words[i] = benchWords[i%len(benchWords)]
	}
	return json.Marshal(map[string]any{
		"model":      model,
		"messages":   []map[string]string{{"role": "user", "content": strings.Join(words, " ")}},
		"max_tokens": maxTokens,
		"stream":     true,
	})
}

var benchWords = []string{"explain", "disaggregated", "prefill", "and", "decode", "serving", "for", "large", "language", "models", "in", "detail"}
