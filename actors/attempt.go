package actors

import (
	"slices"
	"time"

	"github.com/asynkron/protoactor-go/actor"

	"github.com/narwhal-router/narwhal/actors/placement"
	"github.com/narwhal-router/narwhal/config"
	"github.com/narwhal-router/narwhal/transport"
	"github.com/narwhal-router/narwhal/transport/fault"
	"github.com/narwhal-router/narwhal/transport/ingress"
)

// place has placement pick a consumer, decide whether the request pays a prefill leg and pick
// a producer if so (placement.Snapshot.PlaceAttempt), takes a slot on each and hands ingress
// the attempt's plan.
func (s *requestSupervisor) place(ctx actor.Context) {
	if s.x.Context().Err() != nil {
		s.respondShutdown(ctx)
		return
	}
	s.stage = stagePlacing
	model := s.x.Body.Model
	f := s.env.fleet.Load()
	rules := &s.set.fleet
	for s.x.Body.Endpoint.Passthrough() { // one engine and no prefill (ingress/passthrough.go)
		cons, why := f.Pick(rules, fault.PhaseDecode, model, s.avoid, s.full, s.exclude)
		if cons == nil {
			s.noPlacement(ctx, why, fault.PhaseDecode)
			return
		}
		if !cons.Reserve(fault.PhaseDecode) {
			s.full = append(s.full, cons.Name)
			continue
		}
		s.producer, s.consumer = nil, cons
		s.held = [2]*placement.Engine{nil, cons}
		s.ranks = [2]*placement.Rank{} // vLLM's API server balances a passthrough request
		s.reportSlots(cons)
		s.sendAttempt()
		return
	}
	if !s.prompted {
		s.prompt, s.prompted = s.x.Body.Prompt(s.set.fleet.BlockWords), true
		placement.KeyAdapter(&s.prompt, f.Parent(model), model) // lora.go: an adapter's words never match its base's
		s.tokenizePrompt(f)
	}
	blocks := s.prompt.Blocks
	for {
		ask := placement.AttemptAsk{Model: model, Avoid: s.avoid, Full: s.full, Exclude: s.exclude, Prompt: &s.prompt,
			Rules: rules, Rates: &s.env.rates, Now: time.Now()}
		plan := f.PlaceAttempt(ask)
		for phase, prefix := range [...]string{fault.PhaseDecode: plan.ConsumerPrefix, fault.PhasePrefill: plan.ProducerPrefix} {
			if prefix != "" {
				s.env.metrics.PrefixPlacement(fault.Phase(phase).String(), prefix)
			}
		}
		cons, prod := plan.Consumer, plan.Producer
		if cons != nil {
			s.decision, s.prefixMatch, s.predicted = plan.Decision, plan.ConsumerMatch, plan.Predicted
		}
		if !plan.Placed() {
			s.noPlacement(ctx, plan.Why, plan.Phase)
			return
		}
		// The views were read a moment ago; the slots are the authority. A refusal narrows the
		// next round, so the loop ends.
		if prod != nil && !prod.Reserve(fault.PhasePrefill) {
			s.full = append(s.full, prod.Name)
			continue
		}
		s.ranks = [2]*placement.Rank{plan.ProducerRank, plan.ConsumerRank}
		plan.ProducerRank.Take(fault.PhasePrefill, s.prompt.Tokens) // given back with the slot (release)
		var leg placement.ComputeLeg
		if prod != nil {
			now := time.Now()
			leg = placement.ComputeLeg{Engine: prod, Tokens: ask.Uncached(plan.ProducerMatch), At: now,
				Queued: f.LoadFor(prod, placement.Ask{Phase: fault.PhasePrefill, Tokens: s.prompt.Tokens, Rules: rules}, now)}
			prod.PrefillTokens.Add(int64(s.prompt.Tokens)) // returned with the slot (release)
		}
		if !cons.Reserve(fault.PhaseDecode) {
			s.ranks[fault.PhaseDecode] = nil
			if prod != nil {
				s.held[fault.PhasePrefill] = prod
				s.release(ctx, fault.PhasePrefill, nil, true)
			}
			s.full = append(s.full, cons.Name)
			continue
		}
		s.producer, s.consumer = prod, cons
		s.held = [2]*placement.Engine{prod, cons}
		plan.ConsumerRank.Take(fault.PhaseDecode, 0)
		if prod == nil {
			rest := ask.Uncached(plan.ConsumerMatch)
			leg = placement.ComputeLeg{Engine: cons, Queued: int(cons.LocalTokens.Load()), Tokens: rest, At: time.Now()}
			s.holdLocalWork(cons, rest)
		}
		s.leg = leg
		if prod != nil {
			s.reportSlots(prod)
			f.Index.Record(blocks, placement.SlotOf(prod, plan.ProducerRank))
		}
		s.reportSlots(cons)
		f.Index.Record(blocks, placement.SlotOf(cons, plan.ConsumerRank))
		if s.predictedCached = s.cachedPrediction(&ask, plan.ConsumerMatch); prod != nil {
			s.predictedCached = s.cachedPrediction(&ask, plan.ProducerMatch)
		}
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
		Consumer:      s.consumer.Client,
		FailOnMissing: s.set.request.FailOnMissing,
		MaxHandoffAge: s.set.request.MaxHandoffAge,
		ProducerRank:  s.ranks[fault.PhasePrefill].Pin(),
		ConsumerRank:  s.ranks[fault.PhaseDecode].Pin(),
	}}
	if s.producer != nil {
		a.Plan.Producer = s.producer.Client
	}
	if !s.x.Body.Endpoint.Passthrough() {
		a.Decision, a.Reason = s.decision.Name(), s.decision.Reason
	}
	s.x.Send(ingress.Command{Attempt: a})
}

// noPlacement answers, or queues, a request placement found no engine for.
func (s *requestSupervisor) noPlacement(ctx actor.Context, why placement.Scarcity, phase fault.Phase) {
	if why == placement.NoAdmitted && s.lastFault != nil {
		// A retry with nowhere to go (the other engines pushed back or are out of placement):
		// the client learns what failed, not that the fleet has no engine.
		s.respondFault(ctx, s.lastFault)
		return
	}
	switch why {
	case placement.UnknownModel:
		s.reject(ctx, 404, "the model `"+s.x.Body.Model+"` does not exist", "model_not_found")
	case placement.NoAdmitted:
		s.reject(ctx, 503, "no admitted engine can run the "+phase.String()+" leg for model `"+s.x.Body.Model+"`", "no_engine")
	default:
		// The engines of the leg without room, so that the queue can tell whether one freed a
		// slot while the request was on its way to it (admission.go, AwaitCapacity.Full).
		for _, v := range s.env.fleet.Load().Candidates(phase, s.x.Body.Model) {
			if v.Placeable.Load() && !v.HasRoom() && !slices.Contains(s.full, v.Name) {
				s.full = append(s.full, v.Name)
			}
		}
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
		s.env.metrics.MissingDescriptor(s.producer.Name, config.OnMissingRecompute)
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
		s.env.metrics.MissingDescriptor(s.producer.Name, config.OnMissingFail)
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
	for _, e := range [2]*placement.Engine{s.consumer, s.producer} {
		if e != nil {
			e.Commits.Add(1)
			e.LastCommit.Store(now.UnixNano())
			e.Pushback.Served()
		}
	}
	s.env.commits.Committed(s.fingerprint, now)
}
