package actors

import (
	"time"

	"github.com/asynkron/protoactor-go/actor"

	"github.com/narwhal-router/narwhal/config"
	"github.com/narwhal-router/narwhal/transport"
	"github.com/narwhal-router/narwhal/transport/fault"
	"github.com/narwhal-router/narwhal/transport/ingress"
)

// place picks a consumer, decides whether the request pays a prefill leg (decide), picks a
// producer if so, takes a slot on each and hands ingress the attempt's plan.
func (s *requestSupervisor) place(ctx actor.Context) {
	if s.x.Context().Err() != nil {
		s.respondShutdown(ctx)
		return
	}
	s.stage = stagePlacing
	model := s.x.Body.Model
	f := s.env.fleet.load()
	rules := &s.set.fleet
	for s.x.Body.Endpoint.Passthrough() { // one engine and no prefill (ingress/passthrough.go)
		cons, why := f.pick(rules, fault.PhaseDecode, model, s.avoid, s.full, s.exclude)
		if cons == nil {
			s.noPlacement(ctx, why, fault.PhaseDecode)
			return
		}
		if !cons.reserve(fault.PhaseDecode) {
			s.full = append(s.full, cons.name)
			continue
		}
		s.producer, s.consumer = nil, cons
		s.held = [2]*engineView{nil, cons}
		s.reportSlots(cons)
		s.sendAttempt()
		return
	}
	if !s.prompted {
		s.prompt, s.prompted = s.x.Body.Prompt(s.set.fleet.BlockWords), true
	}
	blocks := s.prompt.Blocks
	for {
		c := f.pickFor(ask{phase: fault.PhaseDecode, model: model, avoid: s.avoid, full: s.full, exclude: s.exclude, blocks: blocks, rules: rules}, s.env.metrics)
		if c.engine == nil {
			s.noPlacement(ctx, c.why, fault.PhaseDecode)
			return
		}
		cons := c.engine
		s.decision, s.prefixMatch, s.predicted = s.decide(f, cons, c.match), c.match, prediction{}
		var prod *engineView
		prodMatch := 0 // the producer's prefix-index match, as its pick read it
		if !s.decision.local {
			p := f.pickFor(ask{phase: fault.PhasePrefill, model: model, avoid: append(s.avoid[:len(s.avoid):len(s.avoid)], cons.name),
				full: s.full, exclude: s.exclude, blocks: blocks, tokens: s.prompt.Tokens, rules: rules}, s.env.metrics)
			switch auto := s.set.fleet.Disaggregation == config.DisaggAuto; {
			case auto && p.engine == nil && p.why == noRoom && s.affordsWhileFull(cons, c.match):
				// Every producer is full: the consumer computes a prompt it can afford rather
				// than wait.
				s.decision = decision{true, reasonPrefillSaturated}
			case auto && p.engine != nil && p.engine != cons && s.decision.reason == reasonLongPrompt && s.predicting():
				// A long prompt goes where its first token is predicted sooner.
				if s.decision = s.predict(f, cons, c.match, p); !s.decision.local {
					prod, prodMatch = p.engine, p.match
				}
			case auto && (p.engine == cons || (p.engine == nil && p.why != noRoom)):
				// Nowhere else to prefill (none admitted, or only the consumer itself): the
				// consumer computes the prompt rather than fail or prefill twice.
				s.decision = decision{true, reasonNoProducer}
			case p.engine == nil:
				s.noPlacement(ctx, p.why, fault.PhasePrefill)
				return
			default:
				prod, prodMatch = p.engine, p.match
			}
		}
		// The views were read a moment ago; the slots are the authority. A refusal narrows the
		// next round, so the loop ends.
		if prod != nil && !prod.reserve(fault.PhasePrefill) {
			s.full = append(s.full, prod.name)
			continue
		}
		var leg computeLeg
		if prod != nil {
			now := time.Now()
			leg = computeLeg{engine: prod, tokens: s.uncachedOn(prodMatch), at: now,
				queued: f.loadFor(prod, ask{phase: fault.PhasePrefill, tokens: s.prompt.Tokens, rules: rules}, now)}
			prod.prefillTokens.Add(int64(s.prompt.Tokens)) // returned with the slot (release)
		}
		if !cons.reserve(fault.PhaseDecode) {
			if prod != nil {
				s.held[fault.PhasePrefill] = prod
				s.release(ctx, fault.PhasePrefill, nil, true)
			}
			s.full = append(s.full, cons.name)
			continue
		}
		s.producer, s.consumer = prod, cons
		s.held = [2]*engineView{prod, cons}
		if prod == nil {
			rest := s.uncachedOn(c.match)
			leg = computeLeg{engine: cons, queued: int(cons.localTokens.Load()), tokens: rest, at: time.Now()}
			s.holdLocalWork(cons, rest)
		}
		s.leg = leg
		if prod != nil {
			s.reportSlots(prod)
			f.index.record(blocks, prod.idx)
		}
		s.reportSlots(cons)
		f.index.record(blocks, cons.idx)
		break
	}
	s.countDecision()
	s.sendAttempt()
}

// sendAttempt hands ingress the attempt to run; the producer is nil for a passthrough request
// and a local decode.
func (s *requestSupervisor) sendAttempt() {
	s.stage = stageRunning
	a := &ingress.Attempt{N: s.attempt, BackendRequestID: s.backendID, Plan: transport.Plan{
		Consumer:      s.consumer.client,
		FailOnMissing: s.set.request.FailOnMissing,
		MaxHandoffAge: s.set.request.MaxHandoffAge,
	}}
	if s.producer != nil {
		a.Plan.Producer = s.producer.client
	}
	if !s.x.Body.Endpoint.Passthrough() {
		a.Decision, a.Reason = s.decision.name(), s.decision.reason
	}
	s.x.Send(ingress.Command{Attempt: a})
}

// noPlacement answers, or queues, a request placement found no engine for.
func (s *requestSupervisor) noPlacement(ctx actor.Context, why scarcity, phase fault.Phase) {
	if why == noAdmitted && s.lastFault != nil {
		// A retry with nowhere to go (the other engines pushed back or are out of placement):
		// the client learns what failed, not that the fleet has no engine.
		s.respondFault(ctx, s.lastFault)
		return
	}
	switch why {
	case unknownModel:
		s.reject(ctx, 404, "the model `"+s.x.Body.Model+"` does not exist", "model_not_found")
	case noAdmitted:
		s.reject(ctx, 503, "no admitted engine can run the "+phase.String()+" leg for model `"+s.x.Body.Model+"`", "no_engine")
	default:
		s.await(ctx)
	}
}

// onAttemptEnded takes ingress's report of the planned attempt: the commit, or the fault.
func (s *requestSupervisor) onAttemptEnded(ctx actor.Context, o *ingress.AttemptEnded) {
	if o.Attempt != s.attempt || s.stage != stageRunning {
		return // unreachable: one attempt runs at a time
	}
	if !o.PrefillDone.IsZero() {
		s.ttft = o.PrefillDone.Sub(s.x.Arrival)
	}
	if !o.DecodeStarted.IsZero() {
		s.decodeStart, s.handoffAge = o.DecodeStarted, o.HandoffAge
		if s.producer != nil { // a local decode has no handoff
			s.env.metrics.HandoffAge(s.x.Body.Endpoint.String(), o.HandoffAge)
		}
	}
	if o.MissingDescriptor {
		s.env.metrics.MissingDescriptor(s.producer.name, config.OnMissingRecompute)
	}
	if o.Committed {
		// Committed. The first token means the KV cache has moved: the producer's part is over.
		s.firstByte = o.FirstTokenAt.Sub(s.x.Arrival)
		s.dropLocalWork()
		s.measureCommit(o.PrefillDone, o.FirstTokenAt)
		s.stage = stageStreaming
		s.committed()
		s.judge(ctx, true)
		s.release(ctx, fault.PhasePrefill, nil, false)
		return // ingress relays the stream; a hang-up meanwhile shows in StreamFinished
	}
	f := o.Fault
	if f.Kind == fault.MissingDescriptor {
		s.env.metrics.MissingDescriptor(s.producer.name, config.OnMissingFail)
	}
	// The request ended on our side (client gone, shutdown): nothing to learn about the engine.
	cancelled := f.RouterSide()
	if f.Phase == fault.PhasePrefill { // the prefill, or the handoff it made: the consumer never ran
		s.release(ctx, fault.PhasePrefill, f, cancelled)
		s.release(ctx, fault.PhaseDecode, nil, true)
	} else {
		// The producer's part is proven only by a decode that commits: a failed read of its
		// handoff may be its fault (blameboard.go), so its prefill's end resets nothing.
		s.release(ctx, fault.PhasePrefill, nil, true)
		s.release(ctx, fault.PhaseDecode, f, cancelled)
	}
	s.fail(ctx, f)
}

// onStreamFinished takes the data plane's report of how a committed response ended.
func (s *requestSupervisor) onStreamFinished(ctx actor.Context, m *ingress.StreamFinished) {
	s.end = *m
	if n := m.PromptTokens + m.OutputTokens; n > 0 {
		s.env.metrics.FlowTokens(s.x.Flow.Label, s.x.Flow.BandName, n)
	}
	switch f := m.Fault; {
	case m.ClientGone:
		s.env.metrics.ClientDisconnect(stageStreaming.String())
		s.release(ctx, fault.PhaseDecode, nil, true)
		status := 200
		if !s.x.Body.Stream { // the assembled response was never sent
			status = 0
		}
		s.finalize(ctx, status, outcomeClientGone)
	case f != nil:
		s.lastFault = f
		s.env.metrics.EngineFault(f.Engine, f.Phase.String(), f.Kind.String(), f.Reason)
		s.release(ctx, fault.PhaseDecode, f, f.RouterSide())
		status := 200
		if !s.x.Body.Stream { // nothing was sent yet: the client got an error status
			status = f.ClientStatus()
		}
		s.finalize(ctx, status, outcomeStreamError)
	default:
		s.release(ctx, fault.PhaseDecode, nil, false)
		s.finalize(ctx, 200, outcomeSuccess)
	}
}

// committed records the commit on its engines and under the request's fingerprint: the
// evidence the blame board reads that they serve requests and that the request does not fail
// everywhere (blameboard.go); and it ends any backpressure spell of its engines.
func (s *requestSupervisor) committed() {
	now := time.Now()
	for _, e := range [2]*engineView{s.consumer, s.producer} {
		if e != nil {
			e.commits.Add(1)
			e.lastCommit.Store(now.UnixNano())
			e.pushback.served()
		}
	}
	s.env.commits.committed(s.fingerprint, now)
}
