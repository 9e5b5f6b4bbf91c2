package transport

import (
	"context"
	"time"
)

// Exchange is one admitted client request as the data plane holds it: what ingress parsed, the
// context that aborts its engine legs, and the channel on which the request supervisor delivers
// its verdict. Ingress owns the client connection; the supervisor owns every decision.
type Exchange struct {
	// ID is the client-facing request ID: the client's sane X-Request-Id, or a generated one.
	ID       string
	Body     *ClientBody
	Arrival  time.Time
	Deadline time.Time
	// TraceParent and TraceState are the client's W3C trace headers.
	TraceParent string
	TraceState  string

	// Handle is the dispatcher's reference to the request's supervisor.
	Handle any

	ctx     context.Context
	cancel  context.CancelCauseFunc
	verdict chan Verdict
}

// NewExchange prepares an exchange; ingress calls it, tests may too.
func NewExchange(id string, body *ClientBody, arrival, deadline time.Time) *Exchange {
	ctx, cancel := context.WithCancelCause(context.Background())
	return &Exchange{ID: id, Body: body, Arrival: arrival, Deadline: deadline,
		ctx: ctx, cancel: cancel, verdict: make(chan Verdict, 1)}
}

// Context is cancelled when the request must stop: engine legs opened with it are aborted.
func (x *Exchange) Context() context.Context { return x.ctx }

// Abort cancels every engine leg of the exchange with cause.
func (x *Exchange) Abort(cause error) { x.cancel(cause) }

// Deliver hands ingress the verdict. The supervisor calls it exactly once, after every engine
// leg it started has returned, so the client body is never read after ingress lets it go.
func (x *Exchange) Deliver(v Verdict) { x.verdict <- v }

// Await blocks until the supervisor delivers the verdict.
func (x *Exchange) Await() Verdict { return <-x.verdict }

// EngineRequest is the attempt-independent part of the engine request for this exchange.
func (x *Exchange) EngineRequest(backendRequestID string) *Request {
	return &Request{Body: x.Body, BackendRequestID: backendRequestID, Deadline: x.Deadline,
		TraceParent: x.TraceParent, TraceState: x.TraceState}
}

// Verdict is how ingress must answer: relay Stream (commit), or send the error.
type Verdict struct {
	// Stream is set when the request committed: its first token has arrived.
	Stream *DecodeStream
	// Status and Body are the error response when Stream is nil; Status 0 means the client is
	// gone and nothing is to be written.
	Status     int
	Body       []byte
	RetryAfter string
	Timing     Timing
	Routing    Routing
}

// Timing is the measurement contract (SPEC §10), as offsets from the request's arrival; zero
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

// StreamEnd is how the client response ended after commit, as the data plane saw it.
type StreamEnd struct {
	// Fault is nil when the response completed; otherwise it is why the stream ended.
	Fault *Fault
	// ClientGone says the client stopped reading.
	ClientGone bool
	// OutputTokens is the completion token count (from usage, else counted events).
	OutputTokens int
	// Events is the number of token events relayed.
	Events int
	// Bytes is how many bytes were written to the client.
	Bytes int64
	Ended time.Time
}

// Dispatcher runs request supervisors; the actor system implements it.
type Dispatcher interface {
	// Dispatch starts x's supervisor, which answers with x.Deliver.
	Dispatch(x *Exchange)
	// ClientGone tells x's supervisor the client disconnected.
	ClientGone(x *Exchange)
	// Finished tells x's supervisor how its committed response ended.
	Finished(x *Exchange, end StreamEnd)
}
