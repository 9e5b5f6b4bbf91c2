// Package messages is the actor protocol: the plain structs Narwhal's actors exchange. Tokens
// never appear here; they stay on the data plane (transport); nor does any handle on it: every
// message is plain values. Messages are sent as pointers and never modified after sending. The
// package depends on nothing of Narwhal's, so the protocol reads on its own. (What ingress
// reports to a request supervisor about the attempts it runs — ingress.AttemptEnded and
// ingress.StreamFinished — is ingress's own vocabulary and lives there.)
package messages

import "time"

// ---- request supervisor → engine actor ----

// LegOutcome is what an engine's breaker is told about one of its legs, as blame decided it
// (actors/health/blame.go, Leg.News and HandoffNews): a failure to count (Failed), or a success that
// resets the failure streak. A success comes from the request supervisor; a failure before
// commit from the blame board, once it has compared it with other requests' (for a producer, a
// consumer's failed read of its handoff). The engine actor applies it as it is. Nothing is sent
// for a leg whose end says nothing about the engine, nor for a success while the engine has no
// streak: the common case costs no message.
type LegOutcome struct {
	// Failed counts a failure; otherwise the streak is reset.
	Failed bool
	// Note describes the failure for the ejection's cause, e.g. "first_token_timeout on the
	// decode leg (partner p0)".
	Note string
	// Partner is the other engine of the attempt (for a consumer, the producer whose handoff it
	// was decoding): a consumer ejected after a crossed decode is probed with a handoff from it.
	Partner string
}

// ---- ingress and timers → request supervisor ----

// ClientGone reports that the client hung up.
type ClientGone struct{}

// Abort asks a request supervisor to cancel its request (router shutdown).
type Abort struct{}

// QueueTimeout fires when a request waited for capacity for too long.
type QueueTimeout struct{}

// ---- request supervisor ↔ pool ----

// AwaitCapacity queues a request until an engine of the fleet frees a slot for its model.
type AwaitCapacity struct {
	Model string
	// Front keeps the request's place after a wake-up that lost the race for the slot.
	Front bool
	// The request's flow (flow_control): its tenant, the tenant's metric label and weight, its
	// band (an index of flow_control.bands, and its name); Cost its estimated tokens (prompt
	// plus expected output); Arrival and Deadline its own.
	Tenant, Label string
	Weight        float64
	Band          int
	BandName      string
	Cost          int64
	Arrival       time.Time
	Deadline      time.Time
	// Full are the engines the request's placement found without room: if one of them has
	// room by the time the pool queues the request (it was released meanwhile, while the queue
	// looked empty to the releaser), the pool offers it at once.
	Full []string
}

// CapacityAvailable wakes a queued request: it should try placement again. Engine names the
// engine whose free slot it was given ("" for a wake-up of every waiter); the pool counts that
// slot as promised until the request answers with WakeSettled (or leaves the queue).
type CapacityAvailable struct{ Engine string }

// WakeSettled tells the pool a woken request has tried the slot it was promised: it took it, or
// it is back in the queue (sent after its AwaitCapacity), or it ended.
type WakeSettled struct{}

// QueueFull refuses a request the queue will not hold, or no longer holds (flow_control's
// rules): Reason is queue_full, shed, tenant_queue_full or deadline_unmeetable.
type QueueFull struct{ Reason string }

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
	Engine string
	// Incarnation tells apart engines of one name (one removed, one added again under it).
	Incarnation uint64
	State       string // joining, admitted, quarantined, ejected, probing
	Placeable   bool
	HasRoom     bool
	// ByAdmin marks an ejection an operator made; it holds until an operator readmits, so the
	// whole-wave policy leaves it alone.
	ByAdmin bool
	// Cause is what ejected the engine (its last failures, or the operator's reason).
	Cause string
}

// ProbeNow asks an ejected engine to probe at once (the whole-wave policy).
type ProbeNow struct{}

// ---- administration and dumps ----

// Describe asks an actor for a snapshot of its state (EngineState, RequestState, TreeState).
type Describe struct{}

// EngineState is an engine actor's snapshot.
type EngineState struct {
	Name string `json:"name"`
	Role string `json:"role"`
	// State is joining (new to the fleet, placed once its join check passes), admitted,
	// quarantined, ejected, probing, or removing (it left the fleet; its last requests finish).
	State string `json:"state"`
	// Source is where the engine was found: "file" (the configuration's list), "admin" (the
	// admin API) or a discovery source's name.
	Source         string     `json:"source"`
	Streak         int        `json:"streak"`
	Reserved       PhaseSlots `json:"reservations"`
	MaxInflight    int        `json:"max_inflight"`
	Models         []string   `json:"models"`
	QuarantineEnds *time.Time `json:"quarantine_until"`
	EjectedAt      *time.Time `json:"ejected_at"`
	NextProbe      *time.Time `json:"next_probe"`
	LastProbe      *Probe     `json:"last_probe"`
	// JoinCheck is the newest check the engine ran to join the fleet (kept once it is admitted).
	JoinCheck *Probe `json:"join_check,omitempty"`
	Restarts  int    `json:"restarts"`
	// Readmission is how this engine is readmitted after an ejection: "probe" (an inference
	// probe) or "health" (a health check, recovery.readmission: health).
	Readmission string `json:"readmission"`
	// EjectedBy says who ejected the engine: "breaker" (its failures) or "admin"; EjectReason
	// says why (the failures, or the operator's reason). Both are empty unless out of placement
	// by an ejection.
	EjectedBy   string `json:"ejected_by,omitempty"`
	EjectReason string `json:"eject_reason,omitempty"`
	// DecidedBy names the peer node whose verdict set the current state (clusters only);
	// PeerReason is that node's reason.
	DecidedBy  string `json:"decided_by,omitempty"`
	PeerReason string `json:"peer_reason,omitempty"`
	// Load is the engine's load as placement sees it (placement.* in the configuration).
	Load LoadState `json:"load"`
}

// LoadState is an engine's load view: the router's reservations, the last /metrics scrape
// (when placement.scrape_interval_s is set), the score placement compares, and how many prompt
// block hashes the prefix index holds for the engine.
type LoadState struct {
	Reservations int        `json:"reservations"`
	Score        int        `json:"score"`
	PrefixBlocks int        `json:"prefix_blocks"`
	ScrapedAt    *time.Time `json:"scraped_at,omitempty"`
	// Fresh says the last successful scrape is younger than placement.scrape_stale_s, so it
	// counts; a stale one is shown but ignored.
	Fresh          bool     `json:"scrape_fresh"`
	Running        int      `json:"running"`
	Waiting        int      `json:"waiting"`
	KVUsage        *float64 `json:"kv_cache_usage,omitempty"`
	ScrapeError    string   `json:"scrape_error,omitempty"`
	ScrapeFailures int      `json:"scrape_failures,omitempty"`
	// Ranks are the engine's data-parallel ranks, when it has more than one.
	Ranks []RankState `json:"ranks,omitempty"`
}

// RankState is one data-parallel rank of an engine as placement sees it: the reservations on
// it, its last scraped queues, and the prompt blocks the prefix index has for it (estimated
// from our placements, and from its KV events).
type RankState struct {
	Rank         int `json:"rank"`
	Reservations int `json:"reservations"`
	Running      int `json:"running"`
	Waiting      int `json:"waiting"`
	PrefixBlocks int `json:"prefix_blocks"`
	EventBlocks  int `json:"kv_event_blocks"`
}

// PhaseSlots counts reservations per phase.
type PhaseSlots struct {
	Prefill int `json:"prefill"`
	Decode  int `json:"decode"`
}

// Probe is the outcome of one inference probe or join check.
type Probe struct {
	At      time.Time `json:"at"`
	Result  string    `json:"result"` // success | failure | inconclusive
	Reason  string    `json:"reason,omitempty"`
	Partner string    `json:"partner,omitempty"`
	// Mode is the readmission mode that ran: "probe" (inference, plus lifecycle validation
	// with engine_contract) or "health".
	Mode string `json:"mode"`
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

// Eject takes an engine out of placement until an operator readmits it (no probe does).
type Eject struct{ Reason string }

// Readmit readmits an engine an operator ejected; for an engine ejected by its failures it
// probes now and readmits on success. Force readmits without a probe.
type Readmit struct{ Force bool }

// AdminDone answers Eject and Readmit.
type AdminDone struct {
	State string
	Err   string
}
