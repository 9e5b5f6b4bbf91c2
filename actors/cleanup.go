package actors

import (
	"errors"
	"time"

	"github.com/asynkron/protoactor-go/actor"

	"github.com/narwhal-router/narwhal/actors/placement"
	"github.com/narwhal-router/narwhal/messages"
	"github.com/narwhal-router/narwhal/transport/fault"
	"github.com/narwhal-router/narwhal/transport/ingress"
	"github.com/narwhal-router/narwhal/transport/telemetry"
)

// release returns the slot held for phase, exactly once, and hands how the leg ended to blame
// (legEnded): f is the leg's fault (nil: it succeeded), neutral says its end says nothing about
// the engine.
func (s *requestSupervisor) release(ctx actor.Context, phase fault.Phase, f *fault.Fault, neutral bool) {
	e := s.held[phase]
	if e == nil {
		return
	}
	s.held[phase] = nil
	s.ranks[phase].Give(phase, s.prompt.Tokens)
	s.ranks[phase] = nil
	if phase == fault.PhasePrefill {
		e.PrefillTokens.Add(-int64(s.prompt.Tokens))
	} else {
		s.dropLocalWork() // a local decode that ended before its first token
	}
	if wasFull := e.Release(phase); wasFull && s.env.queued.Load() > 0 {
		ctx.Send(s.env.pool, &messages.CapacityFreed{Engine: e.Name})
	}
	s.reportSlots(e)
	if f != nil && f.Kind == fault.Backpressure {
		e.Pushback.PushedBack(time.Now(), f.RetryAfter, s.set.recovery.Backpressure, e.Name, s.env.log)
	}
	partner := s.consumer
	if phase == fault.PhaseDecode {
		partner = s.producer
	}
	l := legEnd{Engine: e, Phase: phase, Fault: f, Neutral: neutral}
	if partner != nil && partner != e {
		l.Partner = partner.Name
		if phase == fault.PhaseDecode {
			l.Producer = partner
		}
	}
	s.legEnded(ctx, l)
}

func (s *requestSupervisor) reportSlots(e *placement.Engine) {
	if e.Removed.Load() {
		return // a leaving engine's gauge is forgotten, or is its successor's under the same name
	}
	p, d := e.Reserved()
	s.env.metrics.EngineInflight(e.Name, p, d)
}

// finalize records the request's one outcome and stops the supervisor.
func (s *requestSupervisor) finalize(ctx actor.Context, status int, outcome string) {
	if s.finalized {
		return
	}
	s.finalized = true
	s.judge(ctx, false) // leg ends still held: the request never committed
	s.stage = stageDone
	s.status, s.outcome = status, outcome
	s.stopQueueTimer()
	s.release(ctx, fault.PhasePrefill, nil, true)
	s.release(ctx, fault.PhaseDecode, nil, true)
	s.x.Abort(errFinished) // nothing of the request may run on
	s.record()
	ctx.Stop(s.self)
}

var errFinished = errors.New("request finished")

// cleanupAbnormalStop runs when the supervisor stops; after a panic it answers the client (once
// ingress is back from a running attempt), releases every slot and cancels what still runs. The
// slots go back through release, like any other: a queued request is woken for the freed slot
// and the slot gauges are updated; the breaker hears nothing of the released slots (a crash
// says nothing of the engine), and each failure held for judgment counts.
func (s *requestSupervisor) cleanupAbnormalStop(ctx actor.Context) {
	if s.finalized {
		return
	}
	s.finalized = true
	s.x.Abort(errors.New("request supervisor crashed"))
	if s.stage != stageStreaming {
		s.answer(ingress.Answer{Status: 500, Body: fault.AppendErrorEnvelope(nil,
			fault.ErrorBody{Message: "internal error in the router", Type: "server_error", Code: "internal_error"})})
	}
	s.release(ctx, fault.PhasePrefill, nil, true)
	s.release(ctx, fault.PhaseDecode, nil, true)
	for _, l := range s.ended { // no judgment after a crash
		s.tell(s.env.root, l, false)
	}
	s.ended = nil
	s.status, s.outcome = 500, outcomeError
	s.record()
}

// record reports the finished request, once: its metrics, its access-log line, and its removal
// from the live set.
func (s *requestSupervisor) record() {
	env := s.env
	now := time.Now()
	total := now.Sub(s.x.Arrival)
	if !s.end.Ended.IsZero() {
		total = s.end.Ended.Sub(s.x.Arrival)
	}
	// A rejected request's last attempt was never placed: it called no engine, and its backend
	// request id was never sent anywhere.
	attempts, backendID := s.attempt, s.backendID
	if s.outcome == outcomeRejected && attempts > 0 {
		attempts, backendID = attempts-1, ""
	}
	env.metrics.RequestDone(telemetry.Request{
		Endpoint: s.x.Body.Endpoint.String(), Model: s.x.Body.Model, Status: s.status, Outcome: s.outcome, Attempts: attempts,
		TTFT: s.ttft, FirstByte: s.firstByte, Total: total,
		OutputToks: s.end.OutputTokens, PromptToks: s.end.PromptTokens, CachedToks: s.end.CachedTokens,
	})
	if s.self != nil {
		env.live.remove(s.self)
	}
	if env.access == nil {
		s.reportPrediction(nil)
		return
	}
	line := &accessLine{
		Time: now.UTC().Format(time.RFC3339Nano), RequestID: s.x.ID, BackendID: backendID,
		Endpoint: s.x.Body.Endpoint.String(), Model: s.x.Body.Model, Stream: s.x.Body.Stream,
		Status: s.status, Outcome: s.outcome, Attempts: attempts,
		TTFT: s.ttft.Seconds(), FirstByte: s.firstByte.Seconds(), Total: total.Seconds(),
		OutputTokens: s.end.OutputTokens, PromptTokens: s.end.PromptTokens, CachedTokens: s.end.CachedTokens,
		Tenant: s.x.Flow.Tenant, Band: s.x.Flow.BandName,
	}
	if s.consumer != nil && s.attempt > 0 && s.outcome != outcomeRejected {
		line.Consumer = s.consumer.Name
		if s.producer != nil { // a passthrough request and a local decode have none
			line.Producer = s.producer.Name
		}
		if !s.x.Body.Endpoint.Passthrough() {
			line.Disaggregation, line.DisaggReason, line.PrefixMatch = s.decision.Name(), s.decision.Reason, s.prefixMatch
			line.PredictedLocal, line.PredictedDisagg = s.predicted.Local.Seconds(), s.predicted.Disaggregated.Seconds()
		}
		s.reportPrediction(line)
	}
	if s.stage != stageQueued && !s.decodeStart.IsZero() {
		line.HandoffAge = s.handoffAge.Seconds()
	}
	if f := s.lastFault; f != nil {
		line.ErrorKind, line.ErrorEngine, line.ErrorDetail, line.Reason = f.Kind.String(), f.Engine, f.Error(), f.Reason
	}
	env.access.write(line)
}
