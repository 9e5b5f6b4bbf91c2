package actors

import (
	"context"
	"fmt"
	"time"

	"github.com/asynkron/protoactor-go/actor"

	"github.com/narwhal-router/narwhal/actors/health"
	"github.com/narwhal-router/narwhal/actors/placement"
	"github.com/narwhal-router/narwhal/config"
	"github.com/narwhal-router/narwhal/messages"
	"github.com/narwhal-router/narwhal/transport"
	"github.com/narwhal-router/narwhal/transport/fault"
	"github.com/narwhal-router/narwhal/transport/kv"
)

// Probe results.
const (
	probeSuccess      = "success"
	probeFailure      = "failure"
	probeInconclusive = "inconclusive"
)

// probeOutcome is a probe's or join check's outcome, and the engine's model list when the
// check had to ask for it.
type probeOutcome struct {
	messages.Probe
	models []string
	// rejected are the partners whose handoff descriptors failed validation on their own
	// (descriptorsRejected): the engine actor tells each.
	rejected []*placement.Engine
	// refused are the pairs whose transfer failed on the consumer's leg while another partner's
	// passed: the pair's fault (pairs.go). The engine actor tells the blame board's actor.
	refused []pairRefused
	// readFailed are such pairs of a check left inconclusive, waiting for another producer:
	// the engine actor keeps them until a check passes (and then tells them) or fails.
	readFailed []pairRefused
	// lastProducer is the producer of the check's last transfer; tp the tensor parallel size
	// the target's own handoff advertised (0: it made none).
	lastProducer *placement.Engine
	tp           int
}

// startProbe moves an ejected engine to probing and runs its readmission check off the actor.
func (a *engineActor) startProbe(ctx actor.Context) {
	st := a.st
	if st.breaker.State() != health.Ejected || st.breaker.ByAdmin() {
		return // an operator's ejection holds until an operator readmits
	}
	st.breaker.ProbeStarted()
	a.transition(ctx, health.Ejected)
	st.probeGen++
	p := a.r.planProbe(st, false)
	gen, self, root := st.probeGen, ctx.Self(), a.r.root
	go func() { root.Send(self, probeFinished{gen: gen, outcome: p.run()}) }()
}

func (a *engineActor) probeFinished(ctx actor.Context, m probeFinished) {
	st := a.st
	if m.gen != st.probeGen || st.breaker.State() != health.Probing {
		return // a forced readmission or an eject overtook this probe
	}
	out := m.outcome
	a.tellRejected(ctx, out.rejected)
	a.tellRefused(ctx, out)
	a.storeTP(out)
	st.lastProbe = &out.Probe
	st.view.Why.Store(a.whyOut())
	a.storeModels(out.models)
	a.r.metrics.ProbeResult(st.spec.Name, out.Result)
	a.r.log.Info("engine probe", "engine", st.spec.Name, "mode", out.Mode, "result", out.Result, "reason", out.Reason, "partner", out.Partner)
	now := time.Now()
	switch out.Result {
	case probeSuccess:
		st.breaker.ProbeSucceeded()
	case probeFailure:
		st.breaker.ProbeFailed(now)
	default:
		st.breaker.ProbeInconclusive(now)
	}
	a.transition(ctx, health.Probing)
	a.schedule(ctx)
}

// join runs a joining engine's check off the actor — the readmission probe (or the health
// check with recovery.readmission: health), with engine_contract its contract first, and its
// model list when none is configured — unless one is in flight.
func (a *engineActor) join(ctx actor.Context) {
	st := a.st
	if st.breaker.State() != health.Joining || st.checking || st.leaving {
		return
	}
	st.checking, st.joinChanges = true, a.r.pooled.partnerChanges.Load()
	st.probeGen++
	p := a.r.planProbe(st, true)
	gen, self, root := st.probeGen, ctx.Self(), a.r.root
	go func() { root.Send(self, joinFinished{gen: gen, outcome: p.run()}) }()
}

// joinFinished admits a joining engine whose check passed, ejects one whose check failed (it is
// probed from then on like any ejected engine), and leaves one joining whose check could not
// be completed yet (no partner): it tries again when a partner is admitted (partnerReady), or
// at the next probe interval.
func (a *engineActor) joinFinished(ctx actor.Context, m joinFinished) {
	st := a.st
	if m.gen != st.probeGen || st.breaker.State() != health.Joining {
		return
	}
	st.checking = false
	out := m.outcome
	a.tellRejected(ctx, out.rejected)
	a.tellRefused(ctx, out)
	a.storeTP(out)
	st.joinCheck = &out.Probe
	st.view.Why.Store(a.whyOut()) // readiness's reason, even when the state does not change
	a.storeModels(out.models)
	a.r.metrics.JoinCheck(st.spec.Name, out.Result)
	a.r.log.Info("engine join check", "engine", st.spec.Name, "source", st.source, "mode", out.Mode, "result", out.Result,
		"reason", out.Reason, "partner", out.Partner)
	switch out.Result {
	case probeSuccess:
		st.breaker.Joined()
		a.transition(ctx, health.Joining)
	case probeFailure:
		st.breaker.EjectFor(time.Now(), "join check failed: "+out.Reason)
		a.transition(ctx, health.Joining)
		a.schedule(ctx)
	default:
		if a.r.pooled.partnerChanges.Load() != st.joinChanges { // a partner changed while the check ran: it may complete now
			a.join(ctx)
			return
		}
		ctx.Send(ctx.Parent(), joinWaiting{engine: ctx.Self(), changes: st.joinChanges})
		self, root := ctx.Self(), a.r.root
		if st.timers.probe != nil {
			st.timers.probe.Stop()
		}
		st.timers.probe = time.AfterFunc(a.r.current().Recovery.ProbeIntervalS.Duration(), func() { root.Send(self, probeDue{}) })
	}
}

// descriptorsRejected tells a producer's actor that a probe found its handoff descriptors
// invalid on its own account (descriptorsInvalid): no consumer can use its handoffs, and no
// client request reaches it to count against it (the router refuses them before the decode),
// so it is ejected at once and probed like any ejected engine.
type descriptorsRejected struct{ reason string }

// tellRejected tells each partner a check found with invalid descriptors.
func (a *engineActor) tellRejected(ctx actor.Context, rejected []*placement.Engine) {
	for _, v := range rejected {
		if pid := pidOf(v); pid != nil {
			ctx.Send(pid, descriptorsRejected{reason: "its handoff descriptors fail validation (probe of " + a.st.spec.Name + ")"})
		}
	}
}

// tellRefused tells the blame board's actor of the pairs a check found unable to transfer:
// those it found itself and, when it passed, those earlier inconclusive checks could not read
// (with another producer's handoff read now, those pairs are at fault).
func (a *engineActor) tellRefused(ctx actor.Context, out probeOutcome) {
	st := a.st
	switch out.Result {
	case probeInconclusive:
		st.readFailed = append(st.readFailed, out.readFailed...)
	case probeSuccess:
		for _, m := range st.readFailed {
			if m.producer != out.lastProducer {
				ctx.Send(a.r.env.board, m)
			}
		}
		st.readFailed = nil
	default:
		st.readFailed = nil
	}
	for _, m := range out.refused {
		ctx.Send(a.r.env.board, m)
	}
}

// onDescriptorsRejected ejects an engine in placement whose descriptors a probe found invalid.
func (a *engineActor) onDescriptorsRejected(ctx actor.Context, m descriptorsRejected) {
	st := a.st
	prev := st.breaker.State()
	if st.leaving || (prev != health.Admitted && prev != health.Quarantined) {
		return
	}
	st.breaker.EjectFor(time.Now(), m.reason)
	a.r.log.Warn("producer ejected: its handoff descriptors fail validation", "engine", st.spec.Name, "reason", m.reason)
	a.transition(ctx, prev)
	a.schedule(ctx)
}

// storeTP keeps the tensor parallel size the engine's own handoff advertised in a check.
func (a *engineActor) storeTP(out probeOutcome) {
	if out.tp > 0 {
		a.st.view.TP.Store(int32(out.tp))
	}
}

// storeModels keeps the model list a check found, for an engine that had none.
func (a *engineActor) storeModels(models []string) {
	if len(models) > 0 && a.st.view.Models.Load() == nil {
		ms := models
		a.st.view.Models.Store(&ms)
	}
}

// planProbe decides the two legs of a probe. A consumer is probed with a handoff from the
// producer whose crossed decode failed on it (else from any admitted producer); a producer hands
// to any admitted consumer; a `both` engine with no such partner probes itself (same-worker).
//
// A join check (join) plans the same way, with one more case: a consumer with no admitted
// producer, in a fleet where no producer is joining either (none exists, or every one is out)
// and whose policy does not disaggregate every request (disaggregation.policy other than
// always), is judged on a local decode — the path its requests take. While a producer is still
// joining, the check waits for it instead (inconclusive), so a fleet that starts all at once
// checks its consumers' KV pulls: producers are judged on their prefill alone, consumers then
// with the first admitted producer.
func (r *Router) planProbe(st *engineState, join bool) *probe {
	cur := r.current()
	f := r.fleet.Load()
	p := &probe{r: r, rt: cur, target: st.view, spec: st.spec, join: join}
	model := st.view.FirstModel()
	if cur.EngineContract != nil && cur.EngineContract.Model != "" {
		model = cur.EngineContract.Model
	}
	partner := f.Engine(st.breaker.Partner())
	now := time.Now()
	switch {
	case st.spec.Role == config.RoleDecode || (st.spec.Role == config.RoleBoth && partner != nil):
		if partner != nil && (partner.Suspected(now) || !partner.Placeable.Load()) {
			// The producer whose handoff failed here is out, or its handoffs fail on other
			// consumers too: another producer's handoff judges this consumer, or none does
			// (inconclusive).
			partner = nil
		}
		if partner != nil {
			if ok, _ := f.Pairable(partner, st.view); !ok {
				partner = nil // the pair cannot transfer: it says nothing of this consumer
			}
		}
		if partner == nil {
			if cands := trustedProducers(f, st.view, model, now); len(cands) > 0 {
				partner, p.alternatives = cands[0], cands[1:]
			}
		}
		p.producer, p.consumer, p.targetIsConsumer = partner, st.view, true
		p.producerJoining = join && producerJoining(f, st.view)
		if partner == nil && join && cur.Disaggregation.Policy != config.DisaggAlways && !producerJoining(f, st.view) {
			p.local = true
		}
	case st.spec.Role == config.RolePrefill:
		p.producer = st.view
		if cands := pairableConsumers(f, st.view, model); len(cands) > 0 {
			p.consumer, p.alternatives = cands[0], cands[1:]
		}
	default:
		p.producer, p.consumer = st.view, st.view
	}
	return p
}

// probe is one readmission check or join check. By default (recovery.readmission: probe) it
// runs a real tiny inference through a prefill and a decode leg, each bounded by
// engine.first_token_timeout_s, and with engine_contract it first validates the engine's
// lifecycle (model, version, identity, connector). A development fleet that opts in
// (recovery.readmission: health) is readmitted by a successful /health check instead, which
// cannot see an engine that answers /health while its generations hang. An engine without a
// model list (none configured, none found yet) is asked for it first.
type probe struct {
	r        *Router
	rt       *config.Config // the settings the probe was planned with
	target   *placement.Engine
	spec     transport.EngineSpec
	producer *placement.Engine
	consumer *placement.Engine
	// targetIsConsumer says the target runs the decode leg; the producer is its partner.
	targetIsConsumer bool
	// join says this is a join check; local that the consumer is judged on a local decode;
	// producerJoining that another producer is still joining (a consumer's failed read waits
	// for it: the pair may be at fault).
	join, local, producerJoining bool
	// alternatives are the other partners the probe may take, in order: tried in turn while
	// the partner's own leg fails, so a bad partner never decides (and, for a consumer, while
	// its own leg fails reading the partner's handoff: that may be the pair's fault).
	alternatives []*placement.Engine
	// rejected collects the partners whose descriptors failed validation (probeOutcome);
	// refused the pairs at fault (check), readFailed those of a check left waiting; tp is the
	// tensor parallel size the target's own handoff advertised.
	tp         int
	rejected   []*placement.Engine
	refused    []pairRefused
	readFailed []pairRefused
}

func (p *probe) partner() *placement.Engine {
	if p.targetIsConsumer {
		return p.producer
	}
	if p.consumer != p.target {
		return p.consumer
	}
	return nil
}

func (p *probe) result(result, format string, args ...any) messages.Probe {
	out := messages.Probe{At: time.Now(), Result: result, Reason: fmt.Sprintf(format, args...), Mode: p.rt.Recovery.Readmission}
	if partner := p.partner(); partner != nil {
		out.Partner = partner.Name
	}
	return out
}

func (p *probe) legTimeout() time.Duration { return p.rt.Engine.FirstTokenTimeoutS.Duration() }

func (p *probe) run() probeOutcome {
	var out probeOutcome
	ctx, cancel := context.WithTimeout(context.Background(), 3*p.legTimeout()+p.rt.Engine.ModelsTimeoutS.Duration())
	defer cancel()
	model := p.target.FirstModel()
	if p.target.Models.Load() == nil {
		mctx, mcancel := context.WithTimeout(ctx, p.rt.Engine.ModelsTimeoutS.Duration())
		models, err := listModels(mctx, p.target.Client)
		mcancel()
		if err != nil {
			out.Probe = p.result(probeFailure, "model list: %v", err)
			return out
		}
		out.models, model = models, models[0]
	}
	out.Probe = p.check(ctx, model)
	out.rejected, out.refused, out.readFailed = p.rejected, p.refused, p.readFailed
	out.lastProducer, out.tp = p.producer, p.tp
	return out
}

// check runs the probe proper, with the target's model.
func (p *probe) check(ctx context.Context, model string) messages.Probe {
	contract := p.rt.EngineContract
	if p.rt.Recovery.ReadmitByHealth() {
		if err := p.target.Client.Health(ctx); err != nil {
			return p.result(probeFailure, "health check: %v", err)
		}
		return p.result(probeSuccess, "health check passed")
	}
	if contract != nil {
		if err := transport.CheckContract(ctx, p.target.Client, contract); err != nil {
			return p.result(probeFailure, "lifecycle: %v", err)
		}
		if contract.Model != "" {
			model = contract.Model
		}
	}
	if p.producer == nil && !p.local {
		if p.join {
			return p.result(probeInconclusive, "no admitted producer to make a handoff yet")
		}
		return p.result(probeInconclusive, "no admitted producer to make a handoff")
	}
	if p.targetIsConsumer && p.producer != nil && p.producer != p.target {
		// A consumer nothing listens at fails its decode leg whatever the producer does: a
		// connect finds that out before a producer's prefill is spent on it (a burst of
		// registrations of engines that are gone would otherwise cost the producers a prefill
		// each).
		if err := p.target.Client.Reachable(ctx, p.legTimeout()); err != nil {
			return p.result(probeFailure, "decode engine unreachable: %v", err)
		}
	}
	if model == "" {
		return p.result(probeFailure, "no model to probe with")
	}
	var refused []pairRefused
	for {
		res, partnerFailed := p.transfer(ctx, model, contract != nil)
		more := len(p.alternatives) > 0 && ctx.Err() == nil
		readFailed := res.Result == probeFailure && p.targetIsConsumer && !p.local && p.producer != p.consumer
		switch {
		case readFailed && more:
			// The consumer could not read this producer's handoff: the consumer's fault, or
			// the pair's. Another producer tells which.
			refused = append(refused, pairRefused{producer: p.producer, consumer: p.consumer, cause: res.Reason})
		case partnerFailed && more:
			// The partner's own leg failed: that says nothing of the target. Another may.
		case readFailed && p.producerJoining:
			// No other producer to tell whether the consumer or the pair is at fault yet:
			// the check waits for one that is joining (the engine actor keeps this pair).
			p.readFailed = append(refused, pairRefused{producer: p.producer, consumer: p.consumer, cause: res.Reason})
			return p.result(probeInconclusive, "its read of %s's handoff failed (%s); waiting for another producer to tell "+
				"whether the pair is at fault", p.producer.Name, res.Reason)
		default:
			if res.Result == probeSuccess {
				p.refused = refused // another producer's handoff read: those pairs are at fault
			}
			return res
		}
		if p.targetIsConsumer {
			p.producer, p.alternatives = p.alternatives[0], p.alternatives[1:]
		} else {
			p.consumer, p.alternatives = p.alternatives[0], p.alternatives[1:]
		}
	}
}

// transfer runs one probe transfer with the planned partner. partnerFailed says the partner's
// leg failed (the result is then inconclusive); a partner whose descriptors failed validation
// on their own is noted in rejected.
func (p *probe) transfer(ctx context.Context, model string, contract bool) (res messages.Probe, partnerFailed bool) {
	var producer, consumer *transport.EngineClient // consumer nil: a producer with no admitted consumer is judged on its prefill
	if p.producer != nil {
		producer = p.producer.Client
	}
	if p.consumer != nil {
		consumer = p.consumer.Client
	}
	rep, err := transport.ProbeTransfer(ctx, producer, consumer, model, p.legTimeout())
	if p.producer == p.target && len(rep.Descriptor) > 0 {
		p.tp = kv.DescriptorTP(rep.Descriptor)
	}
	if err == nil {
		switch {
		case p.local:
			return p.result(probeSuccess, "inference probe completed (a local decode: no admitted producer in the fleet)"), false
		case contract:
			return p.result(probeSuccess, "lifecycle validated, inference probe completed"), false
		}
		return p.result(probeSuccess, "inference probe completed"), false
	}
	// Which side failed decides (health.JudgeProbe): the target's own leg failing is a
	// failure, the partner's leg failing says nothing about the target.
	leg := fault.PhaseDecode
	f, isFault := fault.As(err)
	if isFault {
		leg = f.Phase
	}
	j := health.JudgeProbe(health.ProbeFault{TargetIsConsumer: p.targetIsConsumer, Alone: p.producer == p.consumer || p.local,
		Leg: leg, DescriptorsInvalid: isFault && descriptorsInvalid(f)})
	switch {
	case j.OwnDescriptors:
		return p.result(probeFailure, "its handoff descriptors fail validation: %v", err), false
	case j.Failed:
		return p.result(probeFailure, "%v", err), false
	case j.RejectPartner:
		p.rejected = append(p.rejected, p.producer)
	}
	return p.result(probeInconclusive, "partner %s failed its leg: %v", p.partner().Name, err), j.PartnerFailed
}

// descriptorsInvalid says f is a handoff descriptor that failed the producer's own endpoint
// rules (transport/kv's endpoint policy: host, pinned endpoint, kv.allowed_ports), which depend
// on the producer's configuration alone: no consumer can read such a producer's handoffs. A
// mismatch of the pair (the connectors differ) is not the producer's alone.
func descriptorsInvalid(f *fault.Fault) bool {
	return f.Kind == fault.Descriptor && f.Reason == kv.ReasonEndpointMismatch
}

// listModels asks the engine which models it serves; none is an error.
func listModels(ctx context.Context, c *transport.EngineClient) ([]string, error) {
	ids, err := c.ModelIDs(ctx)
	if err == nil && len(ids) == 0 {
		err = errNoModels
	}
	return ids, err
}
