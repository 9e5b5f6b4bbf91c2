package actors

import (
	"context"
	"errors"
	"fmt"
	"io"
	"time"

	"github.com/asynkron/protoactor-go/actor"
	"github.com/google/uuid"

	"github.com/narwhal-router/narwhal/config"
	"github.com/narwhal-router/narwhal/messages"
	"github.com/narwhal-router/narwhal/transport"
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
	if st.breaker.state != ejected {
		return
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
	a.r.metrics.ProbeResult(st.cfg.Name, out.Result)
	a.r.log.Info("engine probe", "engine", st.cfg.Name, "result", out.Result, "reason", out.Reason, "partner", out.Partner)
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
	p := &probe{r: r, target: st.view, cfg: st.cfg}
	partner := r.fleet.engine(st.breaker.partner)
	switch {
	case st.cfg.Role == config.RoleDecode || (st.cfg.Role == config.RoleBoth && partner != nil):
		if partner == nil {
			partner = r.fleet.anyAdmitted(messages.PhasePrefill, st.view)
		}
		p.producer, p.consumer, p.targetIsConsumer = partner, st.view, true
	case st.cfg.Role == config.RolePrefill:
		p.producer, p.consumer = st.view, r.fleet.anyAdmitted(messages.PhaseDecode, st.view)
	default:
		p.producer, p.consumer = st.view, st.view
	}
	return p
}

// probe is one readmission check. Without engine_contract it is a /health check (development
// fleets); with one, it validates the engine's lifecycle (model, version, identity, connector)
// and runs a real tiny inference through a prefill and a decode leg.
type probe struct {
	r        *Router
	target   *engineView
	cfg      config.Engine
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
	out := messages.Probe{At: time.Now(), Result: result, Reason: fmt.Sprintf(format, args...)}
	if partner := p.partner(); partner != nil {
		out.Partner = partner.name
	}
	return out
}

func (p *probe) legTimeout() time.Duration { return p.r.cfg.Engine.FirstTokenTimeoutS.Duration() }

func (p *probe) run() messages.Probe {
	contract := p.r.cfg.EngineContract
	if contract == nil {
		ctx, cancel := context.WithTimeout(context.Background(), p.legTimeout())
		defer cancel()
		if err := p.target.client.Health(ctx); err != nil {
			return p.result(probeFailure, "health check: %v", err)
		}
		return p.result(probeSuccess, "health check passed")
	}
	if reason := p.lifecycle(contract); reason != "" {
		return p.result(probeFailure, "lifecycle: %s", reason)
	}
	return p.inference(contract)
}

// lifecycle checks the pinned contract: the model (and max_model_len) is served, the version
// matches, and the engine is configured with the pinned connector.
func (p *probe) lifecycle(c *config.EngineContract) string {
	if c.Connector != "" && p.cfg.KV.Connector != c.Connector {
		return fmt.Sprintf("engine uses connector %q, contract pins %q", p.cfg.KV.Connector, c.Connector)
	}
	ctx, cancel := context.WithTimeout(context.Background(), p.legTimeout())
	defer cancel()
	if c.Model != "" || c.MaxModelLen > 0 {
		models, err := p.target.client.Models(ctx)
		if err != nil {
			return err.Error()
		}
		found := false
		for _, m := range models {
			if m.ID == c.Model || c.Model == "" {
				found = true
				if c.MaxModelLen > 0 && m.MaxModelLen != c.MaxModelLen {
					return fmt.Sprintf("model %s has max_model_len %d, contract pins %d", m.ID, m.MaxModelLen, c.MaxModelLen)
				}
			}
		}
		if !found {
			return fmt.Sprintf("engine does not serve the pinned model %q", c.Model)
		}
	}
	if c.Version != "" {
		v, err := p.target.client.Version(ctx)
		if err != nil {
			return err.Error()
		}
		if v != c.Version {
			return fmt.Sprintf("engine runs version %q, contract pins %q", v, c.Version)
		}
	}
	return ""
}

// inference runs prefill then decode with the target on its own side of the handoff. A failure
// of the partner's leg says nothing about the target: the probe is inconclusive.
func (p *probe) inference(c *config.EngineContract) messages.Probe {
	model := c.Model
	if model == "" {
		if ms := p.target.models.Load(); ms != nil && len(*ms) > 0 {
			model = (*ms)[0]
		}
	}
	if model == "" {
		return p.result(probeFailure, "no model to probe with")
	}
	body, err := transport.ParseClientBody(transport.EndpointCompletions,
		[]byte(fmt.Sprintf(`{"model":%q,"prompt":"narwhal readmission probe","max_tokens":2,"temperature":0}`, model)))
	if err != nil {
		return p.result(probeFailure, "probe body: %v", err)
	}
	producer, consumer, targetIsConsumer := p.producer, p.consumer, p.targetIsConsumer
	if producer == nil {
		return p.result(probeInconclusive, "no producer available to make a handoff")
	}
	req := &transport.Request{Body: body, BackendRequestID: "probe-" + uuid.NewString()}

	req.Deadline = time.Now().Add(p.legTimeout())
	res, err := producer.client.Prefill(context.Background(), req)
	if err != nil {
		if targetIsConsumer {
			return p.result(probeInconclusive, "partner %s could not make a handoff: %v", producer.name, err)
		}
		return p.result(probeFailure, "prefill: %v", err)
	}
	if consumer == nil { // a producer with no admitted consumer to hand to: judge the prefill alone
		if !res.HasDescriptor() {
			return p.result(probeFailure, "prefill returned no handoff descriptor")
		}
		return p.result(probeSuccess, "prefill produced a handoff; no consumer to complete it")
	}
	if consumer == producer {
		res = res.WithoutTransfer()
	}

	req.Deadline = time.Now().Add(p.legTimeout())
	stream, err := consumer.client.Decode(context.Background(), res, req)
	if err != nil {
		if f, ok := transport.AsFault(err); ok && f.Kind == transport.FaultDescriptor {
			if targetIsConsumer {
				return p.result(probeInconclusive, "partner %s made an invalid handoff: %s", producer.name, f.Detail)
			}
			return p.result(probeFailure, "lifecycle: %s", f.Detail)
		}
		if targetIsConsumer {
			return p.result(probeFailure, "decode: %v", err)
		}
		return p.result(probeInconclusive, "partner %s could not decode: %v", consumer.name, err)
	}
	defer stream.Close()
	for {
		_, err := stream.Next()
		if errors.Is(err, io.EOF) {
			return p.result(probeSuccess, "inference probe completed")
		}
		if err != nil {
			if targetIsConsumer {
				return p.result(probeFailure, "decode stream: %v", err)
			}
			return p.result(probeInconclusive, "partner %s decode stream: %v", consumer.name, err)
		}
	}
}
