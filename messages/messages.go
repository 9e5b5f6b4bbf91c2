// Package messages is the actor protocol: the plain structs Narwhal's actors exchange. Tokens
// never appear here; they stay on the data plane (transport). Messages are sent as pointers and
// never modified after sending.
package messages

import (
	"time"

	"github.com/narwhal-router/narwhal/transport"
)

// Phase is the leg a reservation is for.
type Phase uint8

// Phases.
const (
	PhasePrefill Phase = iota
	PhaseDecode
)

func (p Phase) String() string {
	if p == PhasePrefill {
		return "prefill"
	}
	return "decode"
}

// ---- request supervisor → engine actor ----

// LegOutcome tells an engine's breaker how one of its legs ended. Supervisors send it for every
// failure that is the engine's fault, and for a success only while the engine has a failure
// streak to reset: the common case costs no message. Partner is the other engine of the
// attempt (for a consumer, the producer whose handoff it was decoding).
type LegOutcome struct {
	Phase   Phase
	Fault   *transport.Fault // nil: success
	Partner string
}

// ---- data plane → request supervisor ----

// AttemptEnded reports how an attempt ran by ingress ended: committed or failed before commit.
type AttemptEnded struct {
	Outcome transport.Outcome
}

// StreamFinished reports how a committed response ended.
type StreamFinished struct {
	End transport.StreamEnd
}

// ClientGone reports that the client hung up.
type ClientGone struct{}

// QueueTimeout fires when a request waited for capacity for too long.
type QueueTimeout struct{}

// ---- request supervisor ↔ pool ----

// AwaitCapacity queues a request until an engine of the fleet frees a slot for its model.
type AwaitCapacity struct {
	Model string
	// Front keeps the request's place after a wake-up that lost the race for the slot.
	Front bool
}

// CapacityAvailable wakes a queued request: it should try placement again.
type CapacityAvailable struct{}

// QueueFull refuses AwaitCapacity: admission.max_queue requests are already waiting.
type QueueFull struct{}

// StopWaiting removes a request from the queue.
type StopWaiting struct{}

// CapacityFreed tells the pool a full engine just released a slot (sent only while requests
// wait in the admission queue).
type CapacityFreed struct {
	Engine string
}

// ---- engine actor → pool ----

// EngineChanged tells the pool an engine's breaker state or capacity changed.
type EngineChanged struct {
	Engine    string
	State     string // admitted, quarantined, ejected, probing
	Placeable bool
	HasRoom   bool
}

// ProbeNow asks an ejected engine to probe at once (the whole-wave policy).
type ProbeNow struct{}

// ---- administration and dumps ----

// Describe asks an actor for a snapshot of its state (EngineState, RequestState, TreeState).
type Describe struct{}

// EngineState is an engine actor's snapshot.
type EngineState struct {
	Name           string     `json:"name"`
	Role           string     `json:"role"`
	State          string     `json:"state"`
	Streak         int        `json:"streak"`
	Reserved       PhaseSlots `json:"reservations"`
	MaxInflight    int        `json:"max_inflight"`
	Models         []string   `json:"models"`
	QuarantineEnds *time.Time `json:"quarantine_until"`
	EjectedAt      *time.Time `json:"ejected_at"`
	NextProbe      *time.Time `json:"next_probe"`
	LastProbe      *Probe     `json:"last_probe"`
	Restarts       int        `json:"restarts"`
	// DecidedBy names the peer node whose verdict set the current state (clusters only);
	// PeerReason is that node's reason.
	DecidedBy  string `json:"decided_by,omitempty"`
	PeerReason string `json:"peer_reason,omitempty"`
}

// PhaseSlots counts reservations per phase.
type PhaseSlots struct {
	Prefill int `json:"prefill"`
	Decode  int `json:"decode"`
}

// Probe is the outcome of one inference probe.
type Probe struct {
	At      time.Time `json:"at"`
	Result  string    `json:"result"` // success | failure | inconclusive
	Reason  string    `json:"reason,omitempty"`
	Partner string    `json:"partner,omitempty"`
}

// RequestState is a request supervisor's snapshot.
type RequestState struct {
	ID          string     `json:"id"`
	Endpoint    string     `json:"endpoint"`
	Model       string     `json:"model"`
	Phase       string     `json:"phase"`
	Attempt     int        `json:"attempt"`
	Producer    string     `json:"producer,omitempty"`
	Consumer    string     `json:"consumer,omitempty"`
	HandoffAgeS float64    `json:"handoff_age_s,omitempty"`
	Reserved    PhaseSlots `json:"reservations"`
	ElapsedS    float64    `json:"elapsed_s"`
}

// Eject takes an engine out of placement until a probe readmits it.
type Eject struct{ Reason string }

// Readmit asks an engine to probe now and readmit on success; Force readmits without a probe.
type Readmit struct{ Force bool }

// AdminDone answers Eject and Readmit.
type AdminDone struct {
	State string
	Err   string
}
