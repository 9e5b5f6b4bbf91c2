package ingress

import (
	"context"
	"errors"
	"sync/atomic"
	"time"

	"github.com/narwhal-router/narwhal/messages"
	"github.com/narwhal-router/narwhal/transport"
	"github.com/narwhal-router/narwhal/transport/fault"
)

// Plan is one attempt as the request supervisor decided it: which engines run the two legs under
// which backend request ID, and the handoff policy to apply between them. Ingress runs it.
type Plan struct {
	Attempt          int
	BackendRequestID string
	Producer         *transport.EngineClient
	Consumer         *transport.EngineClient
	// SameWorker decodes on the producer itself, without any transfer parameters.
	SameWorker bool
	// Local skips the prefill leg: the consumer computes the prompt itself (Producer is nil).
	Local bool
	// FailOnMissing turns a prefill without a descriptor into a fault (handoff.on_missing:
	// fail); otherwise the decode recomputes the prompt.
	FailOnMissing bool
	// MaxHandoffAge is handoff.max_age_s: an older handoff is stale when decode would start.
	MaxHandoffAge time.Duration
}

// Outcome is how an attempt ended: committed (Stream set: the first token is in) or failed
// before commit (Fault set). Times are zero for what did not happen. Ingress keeps it (the stream
// is its to relay); the supervisor hears Report.
type Outcome struct {
	Attempt int
	Stream  *transport.DecodeStream
	Fault   *fault.Fault

	PrefillDone   time.Time // the prefill response fully read: ttft
	DecodeStarted time.Time
	HandoffAge    time.Duration
	// MissingDescriptor says the producer returned none and the decode recomputed.
	MissingDescriptor bool
}

// Run executes p: the prefill leg, the handoff checks, the decode leg up to its first token. It
// runs on the request's own goroutine and never blocks on the supervisor. The producer's
// connector plans the attempt first; a plan for concurrent legs runs both at once (runConcurrent).
func (x *Exchange) Run(p *Plan) Outcome {
	out := Outcome{Attempt: p.Attempt}
	req := x.EngineRequest(p.BackendRequestID)
	if p.Local {
		return x.runLocal(p, req, out)
	}
	if !p.SameWorker {
		req.Transfer = transport.PlanTransfer(p.Producer, p.Consumer, req.Body.Endpoint, req.BackendRequestID)
	}

	x.prefillStart.Store(time.Now().UnixNano())
	x.setProgress(fault.PhasePrefill, true)
	defer x.setProgress(0, false)
	if req.Transfer.Concurrent() {
		return x.runConcurrent(p, req, out)
	}
	res, err := p.Producer.Prefill(x.ctx, req)
	if err != nil {
		out.Fault = faultOf(err, fault.PhasePrefill, p.Producer.Name())
		return out
	}
	out.PrefillDone = res.Completed

	switch {
	case p.SameWorker:
		res = res.WithoutTransfer() // prefix caching or recompute on the same engine
	case !res.HasDescriptor() && p.FailOnMissing:
		out.Fault = &fault.Fault{Kind: fault.MissingDescriptor, Phase: fault.PhasePrefill, Engine: p.Producer.Name(),
			Detail: "the producer returned no handoff descriptor"}
		return out
	case !res.HasDescriptor():
		out.MissingDescriptor = true
	}
	now := time.Now()
	out.HandoffAge = res.Age(now)
	if out.HandoffAge > p.MaxHandoffAge {
		out.Fault = &fault.Fault{Kind: fault.StaleHandoff, Phase: fault.PhasePrefill, Engine: p.Producer.Name(),
			Detail: "the handoff is " + out.HandoffAge.Round(time.Millisecond).String() +
				" old, older than handoff.max_age_s (" + p.MaxHandoffAge.String() + ")"}
		return out
	}

	out.DecodeStarted = now
	x.setProgress(fault.PhaseDecode, true)
	stream, err := p.Consumer.Decode(x.ctx, res, req)
	if err != nil {
		out.Fault = faultOf(err, fault.PhaseDecode, p.Consumer.Name())
		return out
	}
	out.Stream = stream
	if res.HasDescriptor() || p.SameWorker {
		x.cachedTokens = res.CachedTokens // the prompt was computed by the prefill leg
	}
	return out
}

// runLocal runs a same-worker decode without a prefill leg: the consumer computes the prompt
// and streams; the prompt counts as done when the first token is in.
func (x *Exchange) runLocal(p *Plan, req *transport.Request, out Outcome) Outcome {
	now := time.Now()
	x.prefillStart.Store(now.UnixNano())
	x.setProgress(fault.PhaseDecode, true)
	defer x.setProgress(0, false)
	out.DecodeStarted = now
	stream, err := p.Consumer.Decode(x.ctx, transport.PrefillResult{Started: now}, req)
	if err != nil {
		out.Fault = faultOf(err, fault.PhaseDecode, p.Consumer.Name())
		return out
	}
	out.PrefillDone = stream.FirstTokenAt
	out.Stream = stream
	return out
}

// runConcurrent runs a concurrent connector's legs: the decode starts with the planned
// parameters as the prefill does, and the attempt commits once the first token is in and the
// prefill has answered. Either leg's failure fails the attempt and cancels the other leg: a
// decode without its prefill waits for a KV cache that will never come, and a prefill without
// its decode pins blocks nobody will read. The fault reported is the leg that failed first.
func (x *Exchange) runConcurrent(p *Plan, req *transport.Request, out Outcome) Outcome {
	res, err := transport.Planned(p.Producer, req)
	if err != nil {
		out.Fault = faultOf(err, fault.PhasePrefill, p.Producer.Name())
		return out
	}
	// Both contexts end with x.ctx at the latest (the request's end cancels it), so neither
	// outlives the request even when the attempt succeeds.
	prefillCtx, cancelPrefill := context.WithCancelCause(x.ctx)
	defer cancelPrefill(nil) // every return below comes after the prefill leg has returned
	decodeCtx, cancelDecode := context.WithCancelCause(x.ctx)
	type prefilled struct {
		res transport.PrefillResult
		err error
	}
	var first atomic.Int32 // which leg failed first: 0 neither, 1 prefill, 2 decode
	done := make(chan prefilled, 1)
	go func() {
		r, err := p.Producer.Prefill(prefillCtx, req)
		if err != nil {
			first.CompareAndSwap(0, 1)
			cancelDecode(errPrefillFailed)
		}
		done <- prefilled{r, err}
	}()
	out.DecodeStarted = time.Now()
	x.setProgress(fault.PhaseDecode, true)
	stream, derr := p.Consumer.Decode(decodeCtx, res, req)
	if derr != nil {
		first.CompareAndSwap(0, 2)
		cancelPrefill(errDecodeFailed)
	}
	pre := <-done
	if first.Load() == 1 {
		if stream != nil {
			stream.Close()
		}
		out.Fault = faultOf(pre.err, fault.PhasePrefill, p.Producer.Name())
		return out
	}
	if derr != nil {
		out.Fault = faultOf(derr, fault.PhaseDecode, p.Consumer.Name())
		return out
	}
	out.PrefillDone = pre.res.Completed
	out.Stream = stream
	x.cachedTokens = pre.res.CachedTokens
	return out
}

// errPrefillFailed and errDecodeFailed cancel the other leg of a concurrent attempt.
var (
	errPrefillFailed = errors.New("the prefill leg of the attempt failed")
	errDecodeFailed  = errors.New("the decode leg of the attempt failed")
)

func faultOf(err error, leg fault.Phase, engine string) *fault.Fault {
	if f, ok := fault.As(err); ok {
		return f
	}
	return &fault.Fault{Kind: fault.Unreachable, Phase: leg, Engine: engine, Detail: "engine leg failed", Err: err}
}

// Report is the outcome as the supervisor hears it: plain values, no handle on the stream.
func (o *Outcome) Report() *messages.AttemptEnded {
	m := &messages.AttemptEnded{Attempt: o.Attempt, Committed: o.Stream != nil, Fault: o.Fault,
		PrefillDone: o.PrefillDone, DecodeStarted: o.DecodeStarted, HandoffAge: o.HandoffAge,
		MissingDescriptor: o.MissingDescriptor}
	if o.Stream != nil {
		m.FirstTokenAt = o.Stream.FirstTokenAt
	}
	return m
}

// timing is the measurement contract of a committed attempt.
func (o Outcome) timing(arrival time.Time) Timing {
	return Timing{TTFT: o.PrefillDone.Sub(arrival), FirstByte: o.Stream.FirstTokenAt.Sub(arrival)}
}
