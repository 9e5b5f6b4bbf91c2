package health

import "github.com/narwhal-router/narwhal/transport/fault"

// ProbeFault is a readmission probe's or join check's transfer that failed, as JudgeProbe
// weighs it against the probe's target.
type ProbeFault struct {
	// TargetIsConsumer says the target runs the decode leg, its partner the prefill.
	TargetIsConsumer bool
	// Alone says the target ran both legs (a same-worker probe, or a consumer judged on a local
	// decode): there is no partner to blame.
	Alone bool
	// Leg is the leg that failed.
	Leg fault.Phase
	// DescriptorsInvalid says the producer's handoff descriptor failed the producer's own
	// endpoint rules (host, pinned endpoint, kv.allowed_ports): no consumer can read its
	// handoffs, whoever the consumer is.
	DescriptorsInvalid bool
}

// ProbeJudgement is what a failed probe transfer says.
type ProbeJudgement struct {
	// Failed says the target failed: its own leg, or its own descriptors. Otherwise the probe is
	// inconclusive: the partner's leg failed, which says nothing about the target.
	Failed bool
	// OwnDescriptors says the target is a producer whose descriptors fail validation.
	OwnDescriptors bool
	// PartnerFailed says the partner's own leg failed: another partner may give a verdict.
	PartnerFailed bool
	// RejectPartner says the partner is a producer whose descriptors fail validation: it is
	// ejected at once, since no client request reaches it to count against it.
	RejectPartner bool
}

// JudgeProbe decides which side a failed probe transfer blames: the target when its own leg
// failed (or it ran both), or when it is a producer whose descriptors fail its own endpoint
// rules; else the partner, which leaves the target's probe inconclusive.
func JudgeProbe(f ProbeFault) ProbeJudgement {
	targetLeg := fault.PhasePrefill
	if f.TargetIsConsumer {
		targetLeg = fault.PhaseDecode
	}
	switch {
	case !f.TargetIsConsumer && f.DescriptorsInvalid:
		return ProbeJudgement{Failed: true, OwnDescriptors: true}
	case f.Alone || f.Leg == targetLeg:
		return ProbeJudgement{Failed: true}
	}
	return ProbeJudgement{PartnerFailed: true, RejectPartner: f.TargetIsConsumer && f.DescriptorsInvalid}
}
