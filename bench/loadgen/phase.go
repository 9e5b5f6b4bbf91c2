package loadgen

import (
	"time"

	"github.com/narwhal-router/narwhal/config"
)

// Arm is one side of the comparison.
type Arm string

// The arms.
const (
	Direct Arm = "direct" // the generator runs both engine legs itself
	Routed Arm = "routed" // one request through Narwhal
	// Peer is one request through the peer proxy (bench/peer), read exactly like a routed one.
	Peer Arm = "peer"
	// Baseline is one request through a second Narwhal, another build of the router (an A/B
	// against an older commit), read exactly like a routed one.
	Baseline Arm = "baseline"
)

// Mode says how a phase offers load.
type Mode string

// The modes.
const (
	Closed Mode = "closed" // Concurrency workers, each starting its next request when the last ends
	Open   Mode = "open"   // requests start at Rate per second whatever happens to earlier ones
	Hold   Mode = "hold"   // Streams requests opened at Rate per second and kept to their end
)

// Engine is one simulated engine, as `narwhal sim fleet` describes it.
type Engine struct {
	Name       string `json:"name"`
	Role       string `json:"role"`
	URL        string `json:"url"`
	EngineID   string `json:"engine_id"`
	KVEndpoint string `json:"kv_endpoint"`
	// KVEvents and KVEventsReplay are the engine's KV event endpoints, when it publishes them
	// (the simulator's --kv-events).
	KVEvents       string `json:"kv_events,omitempty"`
	KVEventsReplay string `json:"kv_events_replay,omitempty"`
}

// Setup tells the generator where everything is. It is sent once per process.
type Setup struct {
	// Router is the router's API address (host:port).
	Router string `json:"router"`
	// Peer is the peer proxy's address (host:port), empty when the rig runs none.
	Peer string `json:"peer,omitempty"`
	// Baseline is the second router's API address (host:port), empty when the rig runs none.
	Baseline string `json:"baseline,omitempty"`
	// Engines is the fleet, for the direct arm and fault injection.
	Engines []Engine `json:"engines"`
	Model   string   `json:"model"`
	// Timeouts are the direct arm's engine timeouts: the router's engine section.
	Timeouts config.EngineTimeouts `json:"timeouts"`
	// MaxConns caps the generator's connections to the router (and to each engine).
	MaxConns int `json:"max_conns"`
}

// Phase is one window of load on one arm.
type Phase struct {
	Name string `json:"name"`
	Arm  Arm    `json:"arm"`
	Mode Mode   `json:"mode"`
	// Concurrency is the number of closed-loop workers.
	Concurrency int `json:"concurrency,omitempty"`
	// Rate is requests per second (open) or streams opened per second (hold).
	Rate float64 `json:"rate,omitempty"`
	// Duration is how long new requests start (closed, open). The phase then waits for the
	// requests in flight to end.
	Duration time.Duration `json:"duration,omitempty"`
	// Streams is how many streams a hold phase opens.
	Streams int `json:"streams,omitempty"`
	// HoldFor, in a hold phase, is how long the streams are kept once all are streaming;
	// then the generator hangs up on every one still open (0: let them run to their end).
	HoldFor time.Duration `json:"hold_for,omitempty"`
	// MaxTokens is the output length asked for; a request succeeds only with all of them.
	MaxTokens int `json:"max_tokens"`
	// PromptWords is the prompt length (the simulator counts a word as a token).
	PromptWords int `json:"prompt_words"`
	// Guard bounds one request on the generator's side; a request it cuts is a violation
	// (the router owes every request an outcome well before).
	Guard time.Duration `json:"guard"`
	// MaxInFlight caps open-loop requests in flight; past it a scheduled request is dropped
	// and counted (0: 20,000).
	MaxInFlight int `json:"max_in_flight,omitempty"`
	// Faults injects engine faults while the phase runs (routed phases only).
	Faults *FaultPlan `json:"faults,omitempty"`
	// Flows, when set, split the phase's requests between tenants and bands by share (closed
	// and open phases on a routed-like arm).
	Flows []Flow `json:"flows,omitempty"`
}

// FaultPlan injects one engine-level fault (`POST /sim/faults`, count 1) for a share of the
// requests the phase starts, on a random engine of the fault's role. The fault is consumed by
// the next matching leg on that engine, whichever request it belongs to. At the phase's end
// every engine's leftover faults are listed and cleared, so the next phase runs clean.
type FaultPlan struct {
	// Rate is the share of started requests that trigger one injection (0.05: 5%).
	Rate  float64     `json:"rate"`
	Kinds []FaultKind `json:"kinds"`
}

// FaultKind is one simulator fault spec and how often to pick it.
type FaultKind struct {
	// Spec is the simulator's fault, e.g. "decode.close_after=0".
	Spec string `json:"spec"`
	// Role is the engine role to inject into: "prefill" or "decode".
	Role   string  `json:"role"`
	Weight float64 `json:"weight"`
	// AfterCommit marks faults that strike after the first token reached the client: no
	// retry may cure them (nothing is retried after commit), so they end in a terminal SSE error event.
	AfterCommit bool `json:"after_commit,omitempty"`
}
