package actors

import (
	"context"
	"fmt"
	"time"

	"github.com/asynkron/protoactor-go/actor"

	"github.com/narwhal-router/narwhal/config"
	"github.com/narwhal-router/narwhal/messages"
	"github.com/narwhal-router/narwhal/transport"
	"github.com/narwhal-router/narwhal/transport/fault"
)

// Probe results.
const (
	probeSuccess      = "success"
	probeFailure      = "failure"
	probeInconclusive = "inconclusive"
)

// startProbe moves an ejected engine to probing and runs its readmission check off the actor.
func (a *engineActor) startProbe(ctx actor.Context) {
	st := a.st
	if st.breaker.state != ejected || st.breaker.byAdmin {
		return // an operator's ejection holds until an operator readmits
	}
	st.breaker.probeStarted()
	a.transition(ctx, ejected)
	st.probeGen++
	p := a.r.planProbe(st)
	gen, self, root := st.probeGen, ctx.Self(), a.r.root
	go func() { root.Send(self, probeFinished{gen: gen, outcome: p.run()}) }()
}

func (a *engineActor) probeFinished(ctx actor.Context, m probeFinished) {
	st := a.st
	if m.gen != st.probeGen || st.breaker.state != probing {
		return // a forced readmission or an eject overtook this probe
	}
	out := m.outcome
	st.lastProbe = &out
	a.r.metrics.ProbeResult(st.spec.Name, out.Result)
	a.r.log.Info("engine probe", "engine", st.spec.Name, "mode", out.Mode, "result", out.Result, "reason", out.Reason, "partner", out.Partner)
	now := time.Now()
	switch out.Result {
	case probeSuccess:
		st.breaker.probeSucceeded()
	case probeFailure:
		st.breaker.probeFailed(now)
	default:
		st.breaker.probeInconclusive(now)
	}
	a.transition(ctx, probing)
	a.schedule(ctx)
}

// planProbe decides the two legs of a probe. A consumer is probed with a handoff from the
// producer whose crossed decode failed on it (else from any admitted producer); a producer hands
// to any admitted consumer; a `both` engine with no such partner probes itself (same-worker).
func (r *Router) planProbe(st *engineState) *probe {
	p := &probe{r: r, target: st.view, spec: st.spec}
	partner := r.fleet.engine(st.breaker.partner)
	switch {
	case st.spec.Role == config.RoleDecode || (st.spec.Role == config.RoleBoth && partner != nil):
		if partner == nil {
			partner = r.fleet.anyAdmitted(fault.PhasePrefill, st.view)
		}
		p.producer, p.consumer, p.targetIsConsumer = partner, st.view, true
	case st.spec.Role == config.RolePrefill:
		p.producer, p.consumer = st.view, r.fleet.anyAdmitted(fault.PhaseDecode, st.view)
	default:
		p.producer, p.consumer = st.view, st.view
	}
	return p
}

// probe is one readmission check. By default (recovery.readmission: probe) it runs a real tiny
// inference through a prefill and a decode leg, each bounded by engine.first_token_timeout_s,
// and with engine_contract it first validates the engine's lifecycle (model, version, identity,
// connector). A development fleet that opts in (recovery.readmission: health) is readmitted by
// a successful /health check instead, which cannot see an engine that answers /health while
// its generations hang.
type probe struct {
	r        *Router
	target   *engineView
	spec     config.EngineSpec
	producer *engineView
	consumer *engineView
	// targetIsConsumer says the target runs the decode leg; the producer is its partner.
	targetIsConsumer bool
}

func (p *probe) partner() *engineView {
	if p.targetIsConsumer {
		return p.producer
	}
	if p.consumer != p.target {
		return p.consumer
	}
	return nil
}

func (p *probe) result(result, format string, args ...any) messages.Probe {
	out := messages.Probe{At: time.Now(), Result: result, Reason: fmt.Sprintf(format, args...), Mode: p.r.rt.Recovery.Readmission}
	if partner := p.partner(); partner != nil {
		out.Partner = partner.name
	}
	return out
}

func (p *probe) legTimeout() time.Duration { return p.r.rt.Engine.FirstToken }

func (p *probe) run() messages.Probe {
	contract := p.r.rt.Contract
	ctx, cancel := context.WithTimeout(context.Background(), 3*p.legTimeout())
	defer cancel()
	if p.r.rt.Recovery.ReadmitByHealth() {
		if err := p.target.client.Health(ctx); err != nil {
			return p.result(probeFailure, "health check: %v", err)
		}
		return p.result(probeSuccess, "health check passed")
	}
	var model string
	if contract != nil {
		if err := transport.CheckContract(ctx, p.target.client, contract); err != nil {
			return p.result(probeFailure, "lifecycle: %v", err)
		}
		model = contract.Model
	}
	if p.producer == nil {
		return p.result(probeInconclusive, "no admitted producer to make a handoff")
	}
	if model == "" {
		model = p.target.firstModel()
	}
	if model == "" {
		return p.result(probeFailure, "no model to probe with")
	}
	var consumer *transport.EngineClient // nil: a producer with no admitted consumer is judged on its prefill
	if p.consumer != nil {
		consumer = p.consumer.client
	}
	_, err := transport.ProbeTransfer(ctx, p.producer.client, consumer, model, p.legTimeout())
	if err == nil {
		if contract != nil {
			return p.result(probeSuccess, "lifecycle validated, inference probe completed")
		}
		return p.result(probeSuccess, "inference probe completed")
	}
	// Which side failed decides: the target's own leg failing is a failure, the partner's
	// leg failing says nothing about the target.
	leg := fault.PhaseDecode
	if f, ok := fault.As(err); ok {
		leg = f.Phase
	}
	targetLeg := fault.PhasePrefill
	if p.targetIsConsumer {
		targetLeg = fault.PhaseDecode
	}
	if p.producer == p.consumer || leg == targetLeg {
		return p.result(probeFailure, "%v", err)
	}
	return p.result(probeInconclusive, "partner %s failed its leg: %v", p.partner().name, err)
}
