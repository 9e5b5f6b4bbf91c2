package transport

import (
	"context"
	"errors"
	"sync/atomic"
	"time"

	"github.com/narwhal-router/narwhal/transport/fault"
	"github.com/narwhal-router/narwhal/transport/kv"
)

// Plan is one attempt as it was decided: which engines run its legs and the handoff policy to
// apply between them. Client requests (planned by their request supervisor), readmission probes
// and preflight all run their attempts from a Plan, through Run.
type Plan struct {
	// Producer runs the prefill leg; nil: the consumer computes the prompt itself (a local
	// decode, no prefill leg, no transfer). Producer == Consumer decodes on the producer itself
	// with no transfer parameters (same-worker decode).
	Producer *EngineClient
	// Consumer runs the decode leg (or a passthrough request's only leg); nil: the attempt ends
	// once the producer made a handoff (a probe of a producer with no admitted consumer).
	Consumer *EngineClient
	// FailOnMissing turns a prefill without a descriptor into a fault (handoff.on_missing:
	// fail); otherwise the decode recomputes the prompt. A probe sets it: a producer that makes
	// no handoff has not proven its KV transfer.
	FailOnMissing bool
	// MaxHandoffAge is handoff.max_age_s: an older handoff is stale when decode would start.
	// Zero: no bound.
	MaxHandoffAge time.Duration
	// LegTimeout, when set, bounds each leg on its own (from its start) instead of the request
	// deadline bounding the whole attempt: a probe gives every leg engine.first_token_timeout_s.
	LegTimeout time.Duration
	// ProducerRank and ConsumerRank are the data-parallel ranks of the legs' engines placement
	// chose (RankHeader); zero: none, the engine's API server balances its ranks.
	ProducerRank, ConsumerRank Rank
}

// Outcome is how an attempt ended: committed (Stream, or Answer for a passthrough request, is
// set: the first token or the answer is in) or failed before commit (Fault set). Times are zero
// for what did not happen.
type Outcome struct {
	Stream *DecodeStream
	// Answer is a passthrough request's answer.
	Answer *PassthroughResponse
	Fault  *fault.Fault

	// PrefillDone is when the prefill response was fully read (ttft); for a local decode, when
	// its first token arrived.
	PrefillDone   time.Time
	DecodeStarted time.Time
	HandoffAge    time.Duration
	// MissingDescriptor says the producer returned none and the decode recomputed.
	MissingDescriptor bool
	// CachedTokens is what the committed stream's usage must report as cached prompt tokens:
	// the producer's own count after a transfer, or -1 to pass the consumer's count through (a
	// local or recomputed decode).
	CachedTokens int
	// Descriptor is the handoff the producer made, as it sent it (nil: none, or same-worker).
	Descriptor []byte
}

// Committed reports whether the attempt reached its first generated token (or its answer).
func (o *Outcome) Committed() bool { return o.Stream != nil || o.Answer != nil }

// Progress hears where a running attempt stands: the leg it is on, and when the attempt
// started (its handoff ages from then). Supervisor-tree dumps read it; no decision does.
type Progress interface {
	Leg(leg fault.Phase, attemptStart time.Time)
}

// Step is one step of an attempt, as an Observer hears it.
type Step uint8

// The steps of an attempt. A disaggregated attempt is prefill, handoff, decode; a same-worker
// decode after a prefill leg has no handoff; a local decode is its decode alone; a passthrough
// request its one leg.
const (
	StepPrefill     Step = iota // the prefill leg on the producer
	StepHandoff                 // the handoff's checks: descriptor present, age, valid for the consumer
	StepDecode                  // the decode leg on the consumer, up to its first generated token
	StepPassthrough             // a passthrough request's one leg
	StepCount
)

var stepNames = [StepCount]string{"prefill", "handoff", "decode", "passthrough"}

func (s Step) String() string { return stepNames[s] }

// Observer is what a Progress may also implement to hear each step of the attempt start and
// end; tracing makes a span of each. StepStarted returns the W3C traceparent the step's engine
// request carries instead of the client's ("" keeps the client's). StepEnded's f is the step's
// fault, nil when it succeeded: for StepDecode that is the commit (the first token is in; the
// stream goes on after Run returns). The calls of one step come from one goroutine, in order;
// a concurrent connector's prefill and decode steps overlap. Run calls nothing when progress
// is no Observer, so an attempt without one pays nothing for the hook.
type Observer interface {
	StepStarted(step Step, engine string) (traceParent string)
	StepEnded(step Step, f *fault.Fault)
}

// Run carries out p for req: the prefill leg, the descriptor's checks (identity, connector,
// endpoint, age), and the decode leg up to its first generated token, or a passthrough
// request's one leg. The producer's connector plans the attempt first; a connector that plans
// both legs up front has them run at once (runConcurrent). It blocks until the attempt commits
// or fails, and returns one outcome; cancelling ctx aborts whatever leg is running. progress
// may be nil. On a committed stream the caller owns Stream (Close it).
func Run(ctx context.Context, p *Plan, req *Request, progress Progress) Outcome {
	out := Outcome{CachedTokens: -1}
	start := time.Now()
	req.Ranks[fault.PhasePrefill], req.Ranks[fault.PhaseDecode] = p.ProducerRank, p.ConsumerRank
	obs, _ := progress.(Observer)
	switch {
	case req.Body.Endpoint.Passthrough():
		tell(progress, fault.PhaseDecode, start)
		stepStarted(obs, StepPassthrough, p.Consumer.name, req)
		ans, err := p.Consumer.Passthrough(ctx, req)
		if err != nil {
			out.Fault = faultOf(err, fault.PhaseDecode, p.Consumer.name)
			stepEnded(obs, StepPassthrough, out.Fault)
			return out
		}
		stepEnded(obs, StepPassthrough, nil)
		out.Answer = &ans
		return out
	case p.Producer == nil:
		return runLocal(ctx, p, req, start, progress, obs, out)
	}
	tell(progress, fault.PhasePrefill, start)
	if p.Producer != p.Consumer {
		a := kv.Attempt{Pair: kv.Pair{Producer: p.Producer.kv, Endpoint: req.Body.Endpoint}, BackendRequestID: req.BackendRequestID}
		// The ranks placement chose (rank 0 when the engine has one or it pinned none).
		a.ProducerRank, _ = p.ProducerRank.Pinned()
		a.ConsumerRank, _ = p.ConsumerRank.Pinned()
		a.ProducerRank, a.ConsumerRank = max(a.ProducerRank, 0), max(a.ConsumerRank, 0)
		if p.Consumer != nil {
			a.Pair.Consumer = p.Consumer.kv
		}
		if req.Transfer, out.Fault = planTransfer(ctx, p.Producer, a); out.Fault != nil {
			return out
		}
		if req.Transfer.Concurrent() && p.Consumer != nil {
			p.bound(req, start)
			// A stale engine id was replaced already (the recheck that found it did): nothing to
			// forget.
			if out = runConcurrent(ctx, p, req, start, progress, obs, out); out.Fault != nil && out.Fault.Kind != fault.StaleEngineID {
				forgetTransfer(p.Producer, a)
			}
			return out
		}
	}
	p.bound(req, start)
	stepStarted(obs, StepPrefill, p.Producer.name, req)
	res, err := p.Producer.Prefill(ctx, req)
	if err != nil {
		out.Fault = faultOf(err, fault.PhasePrefill, p.Producer.name)
		stepEnded(obs, StepPrefill, out.Fault)
		return out
	}
	stepEnded(obs, StepPrefill, nil)
	if req.Transfer.Concurrent() {
		// A concurrent connector's producer probed with no consumer: its handoff is the one
		// planned up front (its bootstrap server answered), not a descriptor in its answer.
		if res, err = res.withPlanned(p.Producer, req); err != nil {
			out.Fault = faultOf(err, fault.PhasePrefill, p.Producer.name)
			return out
		}
	}
	out.PrefillDone = res.Completed
	out.Descriptor = res.Descriptor()

	if p.Producer == p.Consumer {
		res = res.WithoutTransfer() // prefix caching or recompute on the same engine: no handoff
		out.Descriptor = nil
	} else if out.Fault = p.handoff(res, req, obs, &out); out.Fault != nil {
		return out
	}
	if p.Consumer == nil {
		return out // a producer probed on its own: the handoff is what it had to make
	}

	now := time.Now()
	out.DecodeStarted = now
	tell(progress, fault.PhaseDecode, start)
	p.bound(req, now)
	stepStarted(obs, StepDecode, p.Consumer.name, req)
	stream, err := p.Consumer.decode(ctx, res, req)
	if err != nil {
		out.Fault = faultOf(err, fault.PhaseDecode, p.Consumer.name)
		stepEnded(obs, StepDecode, out.Fault)
		return out
	}
	stepEnded(obs, StepDecode, nil)
	out.Stream = stream
	if res.HasDescriptor() || p.Producer == p.Consumer {
		out.CachedTokens = res.CachedTokens // the prompt was computed by the prefill leg
	}
	return out
}

// bound gives the next leg its own deadline when the plan bounds legs one by one.
func (p *Plan) bound(req *Request, legStart time.Time) {
	if p.LegTimeout > 0 {
		req.Deadline = legStart.Add(p.LegTimeout)
	}
}

// handoff checks the producer's handoff res before its decode (the handoff step): a missing
// descriptor (a fault under handoff.on_missing: fail, else noted in out), the handoff's age, and
// the descriptor's validity for the consumer (identity, connector, KV endpoint).
func (p *Plan) handoff(res PrefillResult, req *Request, obs Observer, out *Outcome) *fault.Fault {
	stepStarted(obs, StepHandoff, p.Producer.name, nil)
	f := p.checkHandoff(res, req, out)
	stepEnded(obs, StepHandoff, f)
	return f
}

func (p *Plan) checkHandoff(res PrefillResult, req *Request, out *Outcome) *fault.Fault {
	switch {
	case !res.HasDescriptor() && p.FailOnMissing:
		return &fault.Fault{Kind: fault.MissingDescriptor, Phase: fault.PhasePrefill, Engine: p.Producer.name,
			Detail: "the producer returned no handoff descriptor"}
	case !res.HasDescriptor():
		out.MissingDescriptor = true
	}
	out.HandoffAge = res.Age(time.Now())
	if p.MaxHandoffAge > 0 && out.HandoffAge > p.MaxHandoffAge {
		return &fault.Fault{Kind: fault.StaleHandoff, Phase: fault.PhasePrefill, Engine: p.Producer.name,
			Detail: "the handoff is " + out.HandoffAge.Round(time.Millisecond).String() +
				" old, older than handoff.max_age_s (" + p.MaxHandoffAge.String() + ")"}
	}
	if p.Consumer == nil {
		// No consumer (a producer's probe while none is admitted): the descriptor is still held
		// to the producer's own endpoint rules, which no consumer could change.
		if f := p.Producer.validateHandoff(res, req); f != nil && f.Reason == kv.ReasonEndpointMismatch {
			return f
		}
		return nil
	}
	return p.Consumer.validateHandoff(res, req)
}

func tell(p Progress, leg fault.Phase, attemptStart time.Time) {
	if p != nil {
		p.Leg(leg, attemptStart)
	}
}

// stepStarted tells obs that step starts on engine, and gives req (nil: the step sends no
// engine request) the traceparent obs asks for.
func stepStarted(obs Observer, step Step, engine string, req *Request) {
	if obs == nil {
		return
	}
	if tp := obs.StepStarted(step, engine); tp != "" && req != nil {
		req.TraceParent = tp
	}
}

func stepEnded(obs Observer, step Step, f *fault.Fault) {
	if obs != nil {
		obs.StepEnded(step, f)
	}
}

// runLocal runs a same-worker decode without a prefill leg: the consumer computes the prompt
// and streams; the prompt counts as done when the first token is in.
func runLocal(ctx context.Context, p *Plan, req *Request, start time.Time, progress Progress, obs Observer, out Outcome) Outcome {
	tell(progress, fault.PhaseDecode, start)
	out.DecodeStarted = start
	p.bound(req, start)
	stepStarted(obs, StepDecode, p.Consumer.name, req)
	stream, err := p.Consumer.Decode(ctx, PrefillResult{Started: start}, req)
	if err != nil {
		out.Fault = faultOf(err, fault.PhaseDecode, p.Consumer.name)
		stepEnded(obs, StepDecode, out.Fault)
		return out
	}
	stepEnded(obs, StepDecode, nil)
	out.PrefillDone = stream.FirstTokenAt
	out.Stream = stream
	return out
}

// runConcurrent runs a concurrent connector's legs: the decode starts with the planned
// parameters as the prefill does, and the attempt commits once the first token is in and the
// prefill has answered. Either leg's failure fails the attempt and cancels the other leg: a
// decode without its prefill waits for a KV cache that will never come, and a prefill without
// its decode pins blocks nobody will read. So does a recheck of the producer's identity that
// finds the engine id the decode was handed gone (kv.IdentityCheck: the producer restarted),
// as stale_engine_id on the producer. The fault reported is the first of these.
func runConcurrent(ctx context.Context, p *Plan, req *Request, start time.Time, progress Progress, obs Observer, out Outcome) Outcome {
	// The handoff is planned up front: its checks come before either leg starts.
	stepStarted(obs, StepHandoff, p.Producer.name, nil)
	res, err := planned(p.Producer, req, start)
	if err == nil {
		if f := p.Consumer.validateHandoff(res, req); f != nil {
			err = f
		}
	}
	if err != nil {
		out.Fault = faultOf(err, fault.PhasePrefill, p.Producer.name)
		stepEnded(obs, StepHandoff, out.Fault)
		return out
	}
	stepEnded(obs, StepHandoff, nil)
	// The prefill leg runs on a goroutine of its own while the decode runs here: with an
	// observer that traces, it gets a request of its own carrying its own traceparent.
	preq := req
	if obs != nil {
		cp := *req
		preq = &cp
		stepStarted(obs, StepPrefill, p.Producer.name, preq)
	}
	// Both contexts end with ctx at the latest (the request's end cancels it), so neither
	// outlives the request even when the attempt succeeds.
	prefillCtx, cancelPrefill := context.WithCancelCause(ctx)
	defer cancelPrefill(nil) // every return below comes after the prefill leg has returned
	decodeCtx, cancelDecode := context.WithCancelCause(ctx)
	type prefilled struct {
		res PrefillResult
		err error
	}
	var first atomic.Int32 // what ended the attempt first (legsRunning while nothing has)
	stopWatch := req.Transfer.Recheck.AfterGone(func() {
		if first.CompareAndSwap(legsRunning, identityGone) {
			cancelDecode(errStaleEngineID)
			cancelPrefill(errStaleEngineID)
		}
	})
	defer stopWatch()
	done := make(chan prefilled, 1)
	go func() {
		r, err := p.Producer.Prefill(prefillCtx, preq)
		if err != nil {
			first.CompareAndSwap(legsRunning, prefillFailed)
			cancelDecode(errPrefillFailed)
			stepEnded(obs, StepPrefill, faultOf(err, fault.PhasePrefill, p.Producer.name))
		} else {
			stepEnded(obs, StepPrefill, nil)
		}
		done <- prefilled{r, err}
	}()
	out.DecodeStarted = time.Now()
	tell(progress, fault.PhaseDecode, start)
	stepStarted(obs, StepDecode, p.Consumer.name, req)
	stream, derr := p.Consumer.decode(decodeCtx, res, req)
	if derr != nil {
		first.CompareAndSwap(legsRunning, decodeFailed)
		cancelPrefill(errDecodeFailed)
	}
	pre := <-done
	// Both legs have returned: from here a recheck's verdict ends nothing.
	first.CompareAndSwap(legsRunning, legsReturned)
	switch first.Load() {
	case identityGone:
		if stream != nil {
			stream.Close()
		}
		out.Fault = &fault.Fault{Kind: fault.StaleEngineID, Phase: fault.PhasePrefill, Engine: p.Producer.name,
			Detail: "the producer restarted: its bootstrap server no longer lists the engine id the consumer was handed"}
		stepEnded(obs, StepDecode, fault.FromContext(decodeCtx, p.Consumer.name, fault.PhaseDecode)) // cancelled with errStaleEngineID
		return out
	case prefillFailed:
		if stream != nil {
			stream.Close()
		}
		out.Fault = faultOf(pre.err, fault.PhasePrefill, p.Producer.name)
		stepEnded(obs, StepDecode, fault.FromContext(decodeCtx, p.Consumer.name, fault.PhaseDecode)) // cancelled with errPrefillFailed
		return out
	case decodeFailed:
		out.Fault = faultOf(derr, fault.PhaseDecode, p.Consumer.name)
		stepEnded(obs, StepDecode, out.Fault)
		return out
	}
	stepEnded(obs, StepDecode, nil)
	// ttft_s of concurrent legs: the prompt is known computed at the producer's answer or at
	// the consumer's first token, whichever came first (the producer may answer after the
	// consumer pulled the blocks). The handoff's age is zero: nothing waited between the legs.
	out.PrefillDone = pre.res.Completed
	if stream.FirstTokenAt.Before(out.PrefillDone) {
		out.PrefillDone = stream.FirstTokenAt
	}
	out.Stream = stream
	out.CachedTokens = pre.res.CachedTokens
	out.Descriptor = res.Descriptor()
	return out
}

// What ended a concurrent attempt first (runConcurrent's first).
const (
	legsRunning   int32 = iota // nothing yet
	prefillFailed              // the prefill leg failed
	decodeFailed               // the decode leg failed
	identityGone               // a recheck found the producer's engine id gone
	legsReturned               // both legs returned, neither failed first
)

// errPrefillFailed and errDecodeFailed cancel the other leg of a concurrent attempt;
// errStaleEngineID cancels both when the producer's identity is found gone.
var (
	errPrefillFailed = errors.New("the prefill leg of the attempt failed")
	errDecodeFailed  = errors.New("the decode leg of the attempt failed")
	errStaleEngineID = errors.New("the producer restarted: the engine id the decode leg was handed is gone")
)

// faultOf is err as a Fault of leg on engine: the Fault itself, or an unreachable engine.
func faultOf(err error, leg fault.Phase, engine string) *fault.Fault {
	if f, ok := fault.As(err); ok {
		return f
	}
	return &fault.Fault{Kind: fault.Unreachable, Phase: leg, Engine: engine, Detail: "engine leg failed", Err: err}
}
