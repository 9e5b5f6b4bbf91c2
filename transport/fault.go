package transport

import (
	"context"
	"errors"
	"fmt"
	"strconv"
)

// FaultKind classifies what went wrong on an engine leg (SPEC §8). The kind decides the client's
// status, whether a retry may help and what the engine's breaker learns.
type FaultKind uint8

// Fault kinds. The comments give the status a client sees before commit.
const (
	FaultUnreachable       FaultKind = iota + 1 // 502: refused, reset, closed before a response
	FaultTimeout                                // 504: prefill timeout or connect timeout
	FaultFirstTokenTimeout                      // 504: no generated token within first_token_timeout_s
	FaultSilence                                // 504: no chunk within decode_read_timeout_s after the first token
	FaultClosedEarly                            // 502: stream closed before [DONE]
	FaultDoneBeforeToken                        // 502: [DONE] before any generated token
	FaultStreamError                            // the error's own code: an error object inside a 200 stream
	FaultStatus                                 // 502: the engine answered 5xx (other than 503)
	FaultBackpressure                           // 503: the engine answered 429 or 503
	FaultRejected                               // passed through: the engine answered 4xx
	FaultBadResponse                            // 502: a response the router cannot read
	FaultDescriptor                             // 502: the handoff descriptor failed validation
	FaultStaleHandoff                           // 502: the handoff outlived handoff.max_age_s
	FaultMissingDescriptor                      // 502: no descriptor and handoff.on_missing is fail
	FaultDeadline                               // 504: the request deadline passed
	FaultCanceled                               // none: the client went away
	FaultAborted                                // 503: the router cancelled the request (shutdown)
	FaultOverloaded                             // 503: the router ran out of file descriptors or connections
)

var faultNames = [...]string{
	FaultUnreachable:       "unreachable",
	FaultTimeout:           "timeout",
	FaultFirstTokenTimeout: "first_token_timeout",
	FaultSilence:           "silence",
	FaultClosedEarly:       "closed_early",
	FaultDoneBeforeToken:   "done_before_token",
	FaultStreamError:       "stream_error",
	FaultStatus:            "engine_status",
	FaultBackpressure:      "backpressure",
	FaultRejected:          "rejected",
	FaultBadResponse:       "bad_response",
	FaultDescriptor:        "invalid_descriptor",
	FaultStaleHandoff:      "stale_handoff",
	FaultMissingDescriptor: "missing_descriptor",
	FaultDeadline:          "deadline_exceeded",
	FaultCanceled:          "client_disconnected",
	FaultAborted:           "aborted",
	FaultOverloaded:        "router_overloaded",
}

// String is the kind's stable name, used in metrics, logs and the error envelope's code.
func (k FaultKind) String() string {
	if int(k) < len(faultNames) && faultNames[k] != "" {
		return faultNames[k]
	}
	return "fault(" + strconv.Itoa(int(k)) + ")"
}

// Leg says which engine leg a fault happened on.
type Leg uint8

// Legs of one attempt.
const (
	LegPrefill Leg = iota + 1
	LegDecode
)

func (l Leg) String() string {
	if l == LegPrefill {
		return "prefill"
	}
	return "decode"
}

// Fault is an engine leg failure. Detail is safe to show clients: it never holds an engine URL.
type Fault struct {
	Kind   FaultKind
	Leg    Leg
	Engine string
	// Status is the HTTP status the engine sent, or the code of an in-stream error.
	Status int
	// Body is the engine's error body, passed through for 4xx and in-stream errors.
	Body []byte
	// Detail says what happened in words a client can read.
	Detail string
	// Reason is the descriptor rejection reason (FaultDescriptor only).
	Reason string
	// RetryAfter is the engine's Retry-After header, if it sent one.
	RetryAfter string
	// Err is the underlying cause, for logs.
	Err error
}

func (f *Fault) Error() string {
	s := fmt.Sprintf("%s leg on %s: %s: %s", f.Leg, f.Engine, f.Kind, f.Detail)
	if f.Err != nil {
		s += ": " + f.Err.Error()
	}
	return s
}

func (f *Fault) Unwrap() error { return f.Err }

// ClientStatus is the HTTP status the client gets when the fault ends the request before commit.
func (f *Fault) ClientStatus() int {
	switch f.Kind {
	case FaultTimeout, FaultFirstTokenTimeout, FaultSilence, FaultDeadline:
		return 504
	case FaultStreamError, FaultRejected:
		return f.Status
	case FaultBackpressure:
		return 503
	case FaultCanceled, FaultAborted, FaultOverloaded: // a gone client sees nothing; the others, 503
		return 503
	}
	return 502
}

// Retriable says whether a fresh attempt (before visible output) may cure the fault.
func (f *Fault) Retriable() bool {
	switch f.Kind {
	case FaultRejected, FaultDeadline, FaultCanceled, FaultAborted, FaultOverloaded:
		return false
	case FaultStreamError:
		return f.Status >= 500
	}
	return true
}

// StreamFailure says the fault is one of the stream failures of SPEC §8 (first-token timeout,
// silence, close before [DONE], [DONE] before a token) or a timeout-shaped one.
func (f *Fault) StreamFailure() bool {
	switch f.Kind {
	case FaultTimeout, FaultFirstTokenTimeout, FaultSilence, FaultClosedEarly, FaultDoneBeforeToken:
		return true
	}
	return false
}

// CountsAgainstEngine says whether the engine's breaker counts the fault. Client errors (4xx),
// backpressure (load, not failure), the client's own deadline and cancellation never count.
func (f *Fault) CountsAgainstEngine() bool {
	switch f.Kind {
	case FaultRejected, FaultBackpressure, FaultDeadline, FaultCanceled, FaultAborted, FaultOverloaded:
		return false // the router's own trouble is never the engine's
	case FaultStreamError:
		return f.Status >= 500
	}
	return true
}

// AsFault returns err's Fault, if it is one.
func AsFault(err error) (*Fault, bool) {
	var f *Fault
	ok := errors.As(err, &f)
	return f, ok
}

// cancelFault is the fault of a leg whose context was cancelled: the client hung up, or the
// router aborted the request (its cause says why, e.g. a shutdown).
func cancelFault(engine string, leg Leg, ctx context.Context) *Fault {
	cause := context.Cause(ctx)
	if errors.Is(cause, ErrClientGone) {
		return &Fault{Kind: FaultCanceled, Leg: leg, Engine: engine, Detail: "the client disconnected", Err: cause}
	}
	return &Fault{Kind: FaultAborted, Leg: leg, Engine: engine, Detail: cause.Error(), Err: cause}
}
