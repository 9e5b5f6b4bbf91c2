package ingress

import (
	"context"
	"sync/atomic"
	"time"

	"github.com/narwhal-router/narwhal/transport"
	"github.com/narwhal-router/narwhal/transport/fault"
	"github.com/narwhal-router/narwhal/transport/memory"
	"github.com/narwhal-router/narwhal/transport/tracing"
	"github.com/narwhal-router/narwhal/transport/wire"
)

// Exchange is one admitted client request as the data plane holds it: what ingress parsed, the
// context that aborts its engine legs, and the channel on which the request supervisor tells
// ingress what to do next — run an attempt it planned, or answer. Ingress owns the client
// connection and runs the engine legs on the request's own goroutine; the supervisor owns every
// decision (placement, reservations, retries, the answer, cleanup).
type Exchange struct {
	// ID is the client-facing request ID: the client's sane X-Request-Id, or a generated one.
	ID       string
	Body     *wire.ClientBody
	Arrival  time.Time
	Deadline time.Time
	// TraceParent and TraceState are the client's W3C trace headers.
	TraceParent string
	TraceState  string

	// Flow is the request's tenant and priority band (flow_control), for the admission queue.
	Flow Flow

	// Handle is the dispatcher's reference to the request's supervisor.
	Handle any

	// trace is the request's trace; nil when tracing is off.
	trace *tracing.Request

	ctx      context.Context
	cancel   context.CancelCauseFunc
	commands chan Command

	// progress is where the running attempt stands, 0 idle or else 1 + its fault.Phase (for
	// supervisor-tree dumps only: no decision reads it); prefillStart is when its prefill leg
	// started, in Unix nanoseconds.
	progress     atomic.Int32
	prefillStart atomic.Int64

	// cachedTokens is what the committed attempt's usage must report as cached_tokens, or -1
	// to pass the consumer's count through (a local decode, a recomputed one): wire/usage.go.
	cachedTokens int

	// live is the listener's settings the request arrived with; keys and keySlot the API key
	// slot it holds (auth.go), given back when it ends.
	live    *liveSettings
	keys    *keyring
	keySlot atomic.Int32
	// budget is the process's memory budget: what the attempt reads whole (a passthrough
	// answer) is reserved in it.
	budget *memory.Budget
}

// NewExchange prepares an exchange; ingress calls it, tests may too.
func NewExchange(id string, body *wire.ClientBody, arrival, deadline time.Time) *Exchange {
	ctx, cancel := context.WithCancelCause(context.Background())
	return &Exchange{ID: id, Body: body, Arrival: arrival, Deadline: deadline,
		ctx: ctx, cancel: cancel, commands: make(chan Command, 2), cachedTokens: -1}
}

// Context is cancelled when the request must stop: engine legs opened with it are aborted.
func (x *Exchange) Context() context.Context { return x.ctx }

// Abort cancels every engine leg of the exchange with cause.
func (x *Exchange) Abort(cause error) { x.cancel(cause) }

// Command is what the supervisor tells ingress: run Attempt, or (Attempt nil) give the client
// Answer. Ingress waits for a command after the dispatch and after each attempt that failed
// before commit; the supervisor sends exactly one in each of those moments, and nothing
// otherwise — except a supervisor that crashed, which leaves its 500 behind an attempt ingress
// has not read yet (hence room for two).
type Command struct {
	Attempt *Attempt
	Answer  Answer
}

// Send hands ingress its next command.
func (x *Exchange) Send(c Command) {
	select {
	case x.commands <- c:
	default: // unreachable by the protocol above; an actor must never block on it
	}
}

// Await blocks until the supervisor's next command.
func (x *Exchange) Await() Command { return <-x.commands }

// EngineRequest is the engine request of one attempt.
func (x *Exchange) EngineRequest(backendRequestID string) *transport.Request {
	return &transport.Request{Body: x.Body, BackendRequestID: backendRequestID, Deadline: x.Deadline,
		TraceParent: x.TraceParent, TraceState: x.TraceState, Budget: x.budget}
}

// setProgress records the leg the running attempt is on; idle when no attempt runs.
func (x *Exchange) setProgress(phase fault.Phase, running bool) {
	v := int32(0)
	if running {
		v = 1 + int32(phase)
	}
	x.progress.Store(v)
}

// Progress reports the running attempt's leg (running false: none runs) and when its prefill
// started (for dumps).
func (x *Exchange) Progress() (phase fault.Phase, running bool, prefillStart time.Time) {
	p := x.progress.Load()
	if ns := x.prefillStart.Load(); ns != 0 {
		prefillStart = time.Unix(0, ns)
	}
	if p == 0 {
		return 0, false, prefillStart
	}
	return fault.Phase(p - 1), true, prefillStart
}

// Answer is what ingress sends the client when no attempt will commit: an error response, or
// (Status 0) nothing at all, because the client is gone.
type Answer struct {
	Status     int
	Body       []byte
	RetryAfter string
	Timing     Timing
	Routing    Routing
}

// Timing is the measurement contract (ttft and first byte), as offsets from the request's arrival; zero
// means the event did not happen.
type Timing struct {
	TTFT      time.Duration // producer HTTP completion
	FirstByte time.Duration // first generated decode output
}

// Routing says where the request ran, for the optional x-narwhal-* headers.
type Routing struct {
	Producer string
	Consumer string
	Attempts int
}

// AttemptEnded reports how an attempt ingress ran ended: committed (the first token or the
// passthrough answer is in; ingress keeps the stream) or failed before commit (Fault set). Times
// are zero for what did not happen.
type AttemptEnded struct {
	Attempt   int
	Committed bool
	Fault     *fault.Fault

	PrefillDone   time.Time // the prefill response fully read: ttft
	DecodeStarted time.Time
	FirstTokenAt  time.Time // committed only
	HandoffAge    time.Duration
	// MissingDescriptor says the producer returned none and the decode recomputed.
	MissingDescriptor bool
}

// StreamFinished reports how a committed response ended, as the data plane saw it.
type StreamFinished struct {
	// Fault is nil when the response completed; otherwise it is why the stream ended.
	Fault *fault.Fault
	// ClientGone says the client stopped reading.
	ClientGone bool
	// OutputTokens is the completion token count (from usage, else counted events).
	OutputTokens int
	// PromptTokens and CachedTokens are the prompt's tokens and the cached part of them, as
	// the client was told (cached after the correction, wire/usage.go); zero when the engine
	// reported no usage.
	PromptTokens, CachedTokens int
	Ended                      time.Time
}

// countTokens takes the token counts of a committed attempt's usage into end: cached_tokens is
// the committed attempt's true count when it corrects the engine's.
func (x *Exchange) countTokens(end *StreamFinished, t wire.Tokens) {
	end.OutputTokens = max(t.Completion, 0)
	end.PromptTokens = max(t.Prompt, 0)
	end.CachedTokens = max(t.Cached, 0)
	if x.cachedTokens >= 0 {
		end.CachedTokens = x.cachedTokens
	}
}

// Dispatcher runs request supervisors; the actor system implements it.
type Dispatcher interface {
	// Dispatch starts x's supervisor, which sends x its first command.
	Dispatch(x *Exchange)
	// ClientGone tells x's supervisor the client disconnected.
	ClientGone(x *Exchange)
	// AttemptEnded tells x's supervisor how the attempt it planned ended: committed (ingress
	// keeps the stream and relays it) or failed before commit.
	AttemptEnded(x *Exchange, m *AttemptEnded)
	// Finished tells x's supervisor how its committed response ended.
	Finished(x *Exchange, m *StreamFinished)
}

// CorrectUsage returns a usage chunk (its event bytes or data) with cached_tokens set to the
// committed attempt's true count, or b itself when nothing needs correcting (wire/usage.go
// defines the split). The copy is the chunk's only allocation, once per stream.
func (x *Exchange) CorrectUsage(b []byte) []byte {
	if x.cachedTokens < 0 {
		return b
	}
	if out, changed := wire.CorrectCachedTokens(nil, b, x.cachedTokens); changed {
		return out
	}
	return b
}
