package ingress

import (
	"time"

	"github.com/narwhal-router/narwhal/transport"
	"github.com/narwhal-router/narwhal/transport/fault"
	"github.com/narwhal-router/narwhal/transport/tracing"
)

// Attempt is one attempt of a client request as its supervisor planned it: its number, the
// backend request ID both legs carry, and the plan the attempt runner (transport.Run) carries
// out on the request's own goroutine.
type Attempt struct {
	N                int
	BackendRequestID string
	Plan             transport.Plan
	// Decision and Reason are the attempt's disaggregation decision and the rule that made it
	// ("" for a passthrough request), for its trace.
	Decision, Reason string
}

// Run carries out a on the exchange (ingress does for each attempt its supervisor plans; tests
// playing ingress may too). The engine legs need a deep stack (HTTP client, header
// parsing, JSON), and a stack grown on the connection's goroutine would stay grown for the whole
// stream that follows (measured: 16 KiB instead of 8 per open stream), so the attempt runs on a
// goroutine of its own while this one waits; the hand-back is cheap, the waiting goroutine runs
// next on the same P.
func (x *Exchange) Run(a *Attempt) transport.Outcome {
	// Only a traced request hands the runner an Observer: an untraced one pays nothing for it.
	var progress transport.Progress = x
	if x.trace != nil {
		p := tracing.Plan{N: a.N, BackendRequestID: a.BackendRequestID, Consumer: a.Plan.Consumer.Name(),
			Decision: a.Decision, Reason: a.Reason}
		if a.Plan.Producer != nil {
			p.Producer = a.Plan.Producer.Name()
		}
		x.trace.StartAttempt(p)
		progress = tracedExchange{x}
	}
	done := make(chan transport.Outcome, 1)
	go func() {
		out := transport.Run(x.ctx, &a.Plan, x.EngineRequest(a.BackendRequestID), progress)
		x.setProgress(0, false)
		done <- out
	}()
	out := <-done
	x.trace.AttemptEnded(&out)
	if out.Stream != nil {
		x.cachedTokens = out.CachedTokens
	}
	return out
}

// tracedExchange is a traced request's Progress: the exchange's, and the trace's Observer.
type tracedExchange struct{ *Exchange }

func (t tracedExchange) StepStarted(step transport.Step, engine string) string {
	return t.trace.StepStarted(step, engine)
}

func (t tracedExchange) StepEnded(step transport.Step, f *fault.Fault) { t.trace.StepEnded(step, f) }

// endTrace ends the request's trace (nothing when it is not traced) with the status the client
// got and, for a committed response, how it ended.
func (x *Exchange) endTrace(status int, end *StreamFinished) {
	if x.trace == nil {
		return
	}
	f := tracing.Finish{Status: status, ClientGone: status == 0} // 0: the client hung up before any answer
	if end != nil {
		f.Fault, f.ClientGone = end.Fault, f.ClientGone || end.ClientGone
		f.PromptTokens, f.OutputTokens, f.CachedTokens = end.PromptTokens, end.OutputTokens, end.CachedTokens
	}
	x.trace.End(f)
}

// Leg implements transport.Progress: where the running attempt stands, for dumps.
func (x *Exchange) Leg(leg fault.Phase, attemptStart time.Time) {
	x.prefillStart.Store(attemptStart.UnixNano())
	x.setProgress(leg, true)
}

// Report is the attempt's outcome o as the supervisor hears it: plain values, no handle on the
// stream or the answer.
func (a *Attempt) Report(o *transport.Outcome) *AttemptEnded {
	m := &AttemptEnded{Attempt: a.N, Committed: o.Committed(), Fault: o.Fault,
		PrefillDone: o.PrefillDone, DecodeStarted: o.DecodeStarted, HandoffAge: o.HandoffAge,
		MissingDescriptor: o.MissingDescriptor}
	switch {
	case o.Stream != nil:
		m.FirstTokenAt = o.Stream.FirstTokenAt
	case o.Answer != nil:
		m.FirstTokenAt = o.Answer.Completed
	}
	return m
}

// timing is the measurement contract of a committed attempt.
func timing(arrival time.Time, o *transport.Outcome) Timing {
	if o.Answer != nil { // a passthrough request has no prefill: its answer is its first byte
		return Timing{FirstByte: o.Answer.Completed.Sub(arrival)}
	}
	return Timing{TTFT: o.PrefillDone.Sub(arrival), FirstByte: o.Stream.FirstTokenAt.Sub(arrival)}
}
