package actors

import (
	"math/rand/v2"
	"time"

	"github.com/narwhal-router/narwhal/actors/health"
	"github.com/narwhal-router/narwhal/actors/placement"
	"github.com/narwhal-router/narwhal/transport/fault"
)

// Who a probe or join check pairs its target with (planProbe): partners it can transfer with
// (placement's Pairable), in health.Partners' order.

// trustedProducers are the admitted producers (other than not) whose handoffs the blame board
// does not suspect, for a probe, in the order it tries them (health.Partners): those serving
// model first, each group at random.
func trustedProducers(f *placement.Snapshot, not *placement.Engine, model string, now time.Time) []*placement.Engine {
	return probePartners(f, not, model, fault.PhasePrefill, func(v *placement.Engine) bool { return !v.Suspected(now) })
}

// pairableConsumers are the admitted consumers (other than producer) its handoffs may go to
// (placement's Pairable), for a producer's probe, in the order it tries them.
func pairableConsumers(f *placement.Snapshot, producer *placement.Engine, model string) []*placement.Engine {
	return probePartners(f, producer, model, fault.PhaseDecode, func(*placement.Engine) bool { return true })
}

// probePartners are the admitted engines running phase, other than target, that target may be
// paired with (placement's Pairable) and that pass ok, in the order a probe tries them
// (health.Partners): those serving model first, each group at random.
func probePartners(f *placement.Snapshot, target *placement.Engine, model string, phase fault.Phase, ok func(*placement.Engine) bool) []*placement.Engine {
	var cands []*placement.Engine
	for _, v := range f.Engines {
		if v == target || !v.CanServe(phase) || !v.Placeable.Load() || !ok(v) {
			continue
		}
		producer, consumer := v, target
		if phase == fault.PhaseDecode {
			producer, consumer = target, v
		}
		if pairable, _ := f.Pairable(producer, consumer); pairable {
			cands = append(cands, v)
		}
	}
	order := health.Partners(len(cands), func(i int) bool { return model == "" || cands[i].Serves(model) }, rand.IntN)
	out := make([]*placement.Engine, len(order))
	for i, j := range order {
		out[i] = cands[j]
	}
	return out
}

// producerJoining reports whether an engine able to prefill, other than not, is joining.
func producerJoining(f *placement.Snapshot, not *placement.Engine) bool {
	for _, v := range f.Engines {
		if v != not && v.CanServe(fault.PhasePrefill) && health.State(v.State.Load()) == health.Joining {
			return true
		}
	}
	return false
}
