// Package fault owns what can go wrong on an engine leg and what each failure means: the fault
// kinds and the one policy table that decides, for each kind, the client's status, whether a
// retry may help, whether the engine's breaker counts it, whether a retry must shun the engine,
// whether it is the router's own end, whether the attempt is replanned past
// recovery.max_attempts, and how the client's error body is made; and it renders
// that body, before commit (ClientBody) and as the terminal event of a stream that failed after
// commit (AppendTerminalEvent). It also owns Phase, the prefill/decode axis every other package
// shares. It imports only transport/wire (for the error-object check and the Responses API's
// error event), which imports nothing of Narwhal's, so the actor protocol (messages) may depend
// on it.
package fault

import (
	"context"
	"errors"
	"fmt"
	"io"
	"strconv"
)

// Phase is the prefill/decode axis: the leg of an attempt, the kind of a slot reservation, the
// leg a fault happened on. It is the one name for it across Narwhal.
type Phase uint8

// The two phases of a disaggregated request.
const (
	PhasePrefill Phase = iota
	PhaseDecode
)

func (p Phase) String() string {
	if p == PhasePrefill {
		return "prefill"
	}
	return "decode"
}

// Kind classifies what went wrong on an engine leg. Its row in the policy table decides the
// client's status, whether a retry may help and what the engine's breaker learns.
type Kind uint8

// Fault kinds. The policy table below holds what each one means.
const (
	Unreachable       Kind = iota + 1 // refused, reset, closed before a response
	Timeout                           // prefill timeout or connect timeout
	FirstTokenTimeout                 // no generated token within first_token_timeout_s
	Silence                           // no chunk within decode_read_timeout_s after the first token
	ClosedEarly                       // stream closed before [DONE]
	DoneBeforeToken                   // [DONE] before any generated token
	StreamError                       // an error object inside a 200 stream
	Status                            // the engine answered 5xx (other than 503)
	Backpressure                      // the engine answered 429 or 503
	Rejected                          // the engine answered 4xx
	BadResponse                       // a response the router cannot read
	Descriptor                        // the handoff descriptor failed validation
	StaleHandoff                      // the handoff outlived handoff.max_age_s
	MissingDescriptor                 // no descriptor and handoff.on_missing is fail
	Deadline                          // the request deadline passed
	Canceled                          // the client went away
	Aborted                           // the router cancelled the request (shutdown)
	Overloaded                        // the router ran out of file descriptors or connections
	HeldOverflow                      // a decode leg sent more than engine.max_held_* before its first token
	ResponseTooLarge                  // an answer the router reads whole outgrew server.max_response_bytes
	StaleEngineID                     // the producer restarted: the engine id its consumer was handed is gone
)

// Rule is a yes/no column of the policy table that may depend on the engine's own status.
type Rule uint8

// Rules.
const (
	Never Rule = iota
	Always
	// IfEngine5xx holds when the status the engine reported is 500 or more (an in-stream error
	// is the engine's failure only when its code says so).
	IfEngine5xx
)

func (r Rule) holds(status int) bool {
	return r == Always || (r == IfEngine5xx && status >= 500)
}

// PassThrough as a row's Status means the client gets the engine's own status.
const PassThrough = 0

// BodySource says how a fault's client body is made (the table's Body column).
type BodySource uint8

// Body sources. The zero value is the router's envelope.
const (
	// RouterEnvelope is the router's OpenAI error envelope: its code is the kind's name, its
	// message the fault's Detail (never an engine URL), its type the client status's.
	RouterEnvelope BodySource = iota
	// EngineBody is the engine's own error body, passed through: an {"error": ...} object as
	// the engine sent it, a bare error object wrapped as {"error": obj}; a body that is empty or
	// not JSON gets the router's envelope.
	EngineBody
	// EngineRedacted is EngineBody when the operator exposes engine errors
	// (server.expose_engine_errors), and otherwise a redacted envelope: the engine's type, param
	// and code when they are strings or numbers, and a message that names only the kind and the
	// engine's status, as an engine's own message can name its internal addresses.
	EngineRedacted
)

// Policy is one row of the failure policy.
type Policy struct {
	// Name is the kind's stable name in metrics, logs and the error envelope's code.
	Name string
	// Status is the client's HTTP status when the fault ends the request before commit, or
	// PassThrough.
	Status int
	// Retry says whether a fresh attempt (before visible output) may cure the fault.
	Retry Rule
	// Counts says whether the engine's breaker counts the fault: every fault it counts moves the
	// failure streak, however the leg failed (an engine that refuses every connection is ejected
	// as surely as one that hangs).
	Counts Rule
	// Shun says a retry must not use the engine again at all (it asked for less load), rather
	// than merely prefer another.
	Shun bool
	// RouterSide says the fault is the request's or the router's own end (the client left, a
	// shutdown), not an engine failure: no engine-fault metric and no retry.
	RouterSide bool
	// Replan says the attempt was planned on something the router knew wrong and has learned
	// right since (a producer's engine id that changed): a request gets one such attempt again
	// whatever recovery.max_attempts and the retry budget say, as nothing was tried yet that
	// could have worked.
	Replan bool
	// Body says how the client's error body is made, before commit (ClientBody) and in the
	// terminal event of a committed stream (AppendTerminalEvent). Only a PassThrough row
	// carries the engine's body: it is the engine's answer, status and body together.
	Body BodySource
}

// table is the failure policy, one row per kind: the only place it is written down. Its columns
// are Policy's: Name, the client's Status, Retry, breaker Counts, Shun, RouterSide, Replan and
// the client's Body. Every predicate on Fault and both renderings of a fault (ClientBody,
// AppendTerminalEvent) read it; Kind.Policy shows a row.
var table = [...]Policy{
	Unreachable:       {Name: "unreachable", Status: 502, Retry: Always, Counts: Always},
	Timeout:           {Name: "timeout", Status: 504, Retry: Always, Counts: Always},
	FirstTokenTimeout: {Name: "first_token_timeout", Status: 504, Retry: Always, Counts: Always},
	Silence:           {Name: "silence", Status: 504, Retry: Always, Counts: Always},
	ClosedEarly:       {Name: "closed_early", Status: 502, Retry: Always, Counts: Always},
	DoneBeforeToken:   {Name: "done_before_token", Status: 502, Retry: Always, Counts: Always},
	StreamError:       {Name: "stream_error", Status: PassThrough, Retry: IfEngine5xx, Counts: IfEngine5xx, Body: EngineRedacted},
	Status:            {Name: "engine_status", Status: 502, Retry: Always, Counts: Always},
	Backpressure:      {Name: "backpressure", Status: 503, Retry: Always, Counts: Never, Shun: true},
	Rejected:          {Name: "rejected", Status: PassThrough, Retry: Never, Counts: Never, Body: EngineBody},
	BadResponse:       {Name: "bad_response", Status: 502, Retry: Always, Counts: Always},
	Descriptor:        {Name: "invalid_descriptor", Status: 502, Retry: Always, Counts: Always},
	StaleHandoff:      {Name: "stale_handoff", Status: 502, Retry: Always, Counts: Always},
	MissingDescriptor: {Name: "missing_descriptor", Status: 502, Retry: Always, Counts: Always},
	Deadline:          {Name: "deadline_exceeded", Status: 504, Retry: Never, Counts: Never},
	Canceled:          {Name: "client_disconnected", Status: 503, Retry: Never, Counts: Never, RouterSide: true},
	Aborted:           {Name: "aborted", Status: 503, Retry: Never, Counts: Never, RouterSide: true},
	Overloaded:        {Name: "router_overloaded", Status: 503, Retry: Never, Counts: Never},
	HeldOverflow:      {Name: "held_overflow", Status: 502, Retry: Always, Counts: Always},
	// The operator's bound on what the router holds, not an engine failure: a healthy engine
	// that answers a large batch correctly must not be ejected for it, and another engine
	// would give an answer just as large. Like deadline_exceeded it is a failed leg in the
	// engine-fault metric (by its own kind), but neither retried nor counted by a breaker.
	ResponseTooLarge: {Name: "response_too_large", Status: 502, Retry: Never, Counts: Never},
	// A producer that restarted between two attempts (new engine ids, learned while the
	// attempt ran) is no fault of either engine: the consumer handed the old id was never
	// going to get its KV, and the producer is up and answering. The retry is planned on the
	// new id; the producer's health is its probes' and its own legs' business.
	StaleEngineID: {Name: "stale_engine_id", Status: 502, Retry: Always, Counts: Never, Replan: true},
}

// Kinds lists every fault kind, in table order.
func Kinds() []Kind {
	out := make([]Kind, 0, len(table))
	for k := range table {
		if table[k].Name != "" {
			out = append(out, Kind(k))
		}
	}
	return out
}

// Policy returns the kind's row (a copy); an unknown kind gets the row of an unreadable engine
// failure.
func (k Kind) Policy() Policy { return *k.row() }

func (k Kind) row() *Policy {
	if int(k) < len(table) && table[k].Name != "" {
		return &table[k]
	}
	return &unknownPolicy
}

var unknownPolicy = Policy{Status: 502, Retry: Always, Counts: Always}

// String is the kind's stable name, used in metrics, logs and the error envelope's code.
func (k Kind) String() string {
	if p := k.row(); p.Name != "" {
		return p.Name
	}
	return "fault(" + strconv.Itoa(int(k)) + ")"
}

// Fault is an engine leg failure. Detail is safe to show clients (it never holds an engine URL),
// except a StreamError's, which is the engine's text.
type Fault struct {
	Kind   Kind
	Phase  Phase
	Engine string
	// Status is the HTTP status the engine sent, or the code of an in-stream error.
	Status int
	// Body is the engine's error body, passed through for 4xx and in-stream errors.
	Body []byte
	// Detail says what happened in words a client can read. For a StreamError it is the
	// engine's own message, which ClientBody withholds unless the operator exposes it.
	Detail string
	// Reason is the descriptor rejection reason (Descriptor only).
	Reason string
	// RetryAfter is the engine's Retry-After header, if it sent one.
	RetryAfter string
	// Err is the underlying cause, for logs.
	Err error
}

func (f *Fault) Error() string {
	s := fmt.Sprintf("%s leg on %s: %s: %s", f.Phase, f.Engine, f.Kind, f.Detail)
	if f.Err != nil {
		s += ": " + f.Err.Error()
	}
	return s
}

// Unwrap returns the cause, except that a Fault never satisfies errors.Is(err, io.EOF). io.EOF is
// how a reader says its input ended well (DecodeStream.Next after [DONE]), and a caller that
// tests for it must not take a failure for a success: a decode body that ends in an orderly way
// before [DONE] is a ClosedEarly fault whose cause is io.EOF. Such a cause is unwrapped as its
// text only; Err and Error() keep it for logs.
func (f *Fault) Unwrap() error {
	if f.Err != nil && errors.Is(f.Err, io.EOF) {
		return opaqueCause{f.Err}
	}
	return f.Err
}

// opaqueCause shows an error's text and hides its identity.
type opaqueCause struct{ err error }

func (c opaqueCause) Error() string { return c.err.Error() }

// ClientStatus is the HTTP status the client gets when the fault ends the request before commit.
func (f *Fault) ClientStatus() int {
	if s := f.Kind.row().Status; s != PassThrough {
		return s
	}
	return f.Status
}

// Retriable says whether a fresh attempt (before visible output) may cure the fault.
func (f *Fault) Retriable() bool { return f.Kind.row().Retry.holds(f.Status) }

// CountsAgainstEngine says whether the engine's breaker counts the fault. Client errors (4xx),
// backpressure (load, not failure), the client's own deadline and the router's own trouble
// never count.
func (f *Fault) CountsAgainstEngine() bool { return f.Kind.row().Counts.holds(f.Status) }

// Shuns says a retry must avoid the fault's engine entirely.
func (f *Fault) Shuns() bool { return f.Kind.row().Shun }

// RouterSide says the fault is the client's or the router's own end, not an engine failure.
func (f *Fault) RouterSide() bool { return f.Kind.row().RouterSide }

// Replans says the attempt was planned on what the router has learned to be wrong since: the
// request may try once more beyond recovery.max_attempts.
func (f *Fault) Replans() bool { return f.Kind.row().Replan }

// As returns err's Fault, if it is one.
func As(err error) (*Fault, bool) {
	var f *Fault
	ok := errors.As(err, &f)
	return f, ok
}

// ErrClientGone is the cause a request is cancelled with when its client disconnects.
var ErrClientGone = errors.New("client disconnected")

// FromContext is the fault of a leg whose context was cancelled: the client hung up, or the router
// aborted the request (its cause says why, e.g. a shutdown).
func FromContext(ctx context.Context, engine string, phase Phase) *Fault {
	cause := context.Cause(ctx)
	if errors.Is(cause, ErrClientGone) {
		return &Fault{Kind: Canceled, Phase: phase, Engine: engine, Detail: "the client disconnected", Err: cause}
	}
	return &Fault{Kind: Aborted, Phase: phase, Engine: engine, Detail: cause.Error(), Err: cause}
}
