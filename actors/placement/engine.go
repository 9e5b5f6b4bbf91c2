// Package placement decides where a request's legs run: the engine record as placement reads
// it (Engine: slots, load, placeability, models), the fleet snapshot and its candidate lists, the
// prefix indexes (estimated from our placements, exact from the engines' KV cache events), the
// load bound, power of two choices, and the measured prefill rates the time-to-first-token
// prediction reads. It holds no actor and no socket: the clock comes in each Ask and the
// randomness is the Fleet's (NewFleet), so a table test drives every rule.
package placement

import (
	"slices"
	"sync/atomic"
	"time"

	"github.com/narwhal-router/narwhal/actors/health"
	"github.com/narwhal-router/narwhal/config"
	"github.com/narwhal-router/narwhal/transport"
	"github.com/narwhal-router/narwhal/transport/fault"
)

// Engine is an engine as placement sees it, shared by every request supervisor. Its phase
// reservations are taken and returned by supervisors with a compare-and-swap, bounded by
// max_inflight: a slot costs no message, because a round trip to the engine actor is two
// goroutine hand-offs per phase per request (bench/README.md has the measurements). Everything
// else here — placeability, the failure streak, the models — is written by the engine actor
// alone and only read by others.
type Engine struct {
	// Each field has one writer, named beside it (docs/architecture.md has the table); the
	// others only read it. "Pool, before publication" means the field is set when the pool
	// makes the record and never changes once a snapshot holds it.
	//
	// What placement reads of every candidate comes first, so that a walk over the candidates
	// (sift) reads one cache line of each engine.

	// Slots are the reservations held, prefill in the high 32 bits, decode in the low. Writer:
	// the request supervisors, by compare-and-swap (Reserve, Release).
	Slots atomic.Uint64
	// Placeable says the engine is admitted: neither joining, quarantined, ejected nor leaving.
	// Writer: the engine actor.
	Placeable atomic.Bool
	// PrefillTokens is the estimated prompt tokens of the prefill reservations held: a
	// producer's load is its work, and prompts differ a hundredfold in length. Writer: the
	// request supervisors, with the prefill slot they take and give back.
	PrefillTokens atomic.Int64
	// Scraped is the last /metrics scrape (placement.scrape_interval_s). Writer: the engine's
	// scraper goroutine.
	Scraped atomic.Pointer[LoadSample]
	// TP is the tensor parallel size the engine's own handoff descriptors advertise (tp_size),
	// 0 until one of its checks made a handoff. Writer: the engine actor, from its join checks
	// and probes.
	TP atomic.Int32
	// MaxInflight is engines[].max_inflight (0: uncapped). Writer: the pool, before publication.
	MaxInflight int
	// Pushback is the engine's backpressure record. Writer: the request supervisors whose legs
	// end there (health.Pushback: a 429/503, a commit).
	Pushback health.Pushback

	// Idx is the engine's prefix-index slot (its bit), -1 when it has none; Name, Role and
	// Client its identity and connection. Writer: the pool, before publication.
	Idx    int
	Name   string
	Role   config.Role
	Client *transport.EngineClient
	// handle is the engine actor's address (a *actor.PID, kept as any so that placement imports
	// no actor system). Writer: the pool, once, when it starts the actor (SetActor). Atomic,
	// because the engine is in a snapshot before its actor starts (its join check plans with the
	// fleet it is part of).
	handle atomic.Value

	// Models are the models the engine serves. Writer: the pool before publication (configured
	// models), then the engine actor (the models its checks found).
	Models modelList
	// Adapters are the LoRA adapters the engine's GET /v1/models lists, with their base
	// models (lora.go). Writer: the engine's scraper goroutine.
	Adapters adapterList
	// State is the engine's lifecycle state (health.State), for readiness's reasons and probe
	// planning. Writer: the pool before publication (joining), then the engine actor.
	State atomic.Uint32
	// Why says why the engine is not admitted, for readiness's reasons: what ejected it, or
	// its newest join check's or probe's outcome; nil while it is admitted. Writer: the engine
	// actor.
	Why atomic.Pointer[string]
	// Removed says the engine left the fleet: Reserve refuses it from then on, even to a
	// supervisor that picked the engine from an older snapshot. Writer: the engine actor.
	Removed atomic.Bool
	// Streak is the breaker's failure streak, so that a success is reported only if it
	// matters. Writer: the engine actor.
	Streak atomic.Int32
	// TakesOut is the consequence of the next counted failure: true when that failure
	// quarantines or ejects the engine. Writer: the engine actor.
	TakesOut atomic.Bool
	// LocalTokens is the estimated uncached prompt tokens of the local decodes placed on this
	// consumer that have not produced their first token: the prompts it is computing for us.
	// Writer: the request supervisors of those decodes.
	LocalTokens atomic.Int64
	// Rate is the engine's measured prefill rate (ttft.go), as a producer or computing a
	// local decode's prompt. Writer: the request supervisors, at commit.
	Rate RateEWMA

	// Commits counts the requests that committed with the engine as their consumer or
	// producer, and LastCommit is the newest one's time (unix nanoseconds): the evidence the
	// blame board reads that the engine serves other requests. Writer: the request
	// supervisors, at commit.
	Commits    atomic.Uint64
	LastCommit atomic.Int64
	// Suspect, while in the future (unix nanoseconds), says the blame board holds the
	// producer's handoffs responsible for failures on two or more consumers in placement: a
	// consumer's probe picks another partner. Writer: the blame board.
	Suspect atomic.Int64
	// ranks are the engine's data-parallel ranks when it has more than one (ranks.go). Writer:
	// the pool (SetRanks).
	ranks atomic.Pointer[[]*Rank]
}

// SetActor records the engine actor's address (the pool, once, when it starts the actor).
func (v *Engine) SetActor(a any) { v.handle.Store(a) }

// Actor is the engine actor's address, nil until its actor is started.
func (v *Engine) Actor() any { return v.handle.Load() }

// Suspected says the blame board holds the engine's handoffs responsible for failures on two or
// more consumers (health.Board, ProducerSuspect), until the window passes.
func (v *Engine) Suspected(now time.Time) bool { return now.UnixNano() < v.Suspect.Load() }

// modelsChanged counts changes to any engine's model list: a snapshot's candidate lists
// (Snapshot.candidates) were made under one count and are remade once it moves. Model
// lists change on discovery only, so a count shared by every fleet costs nothing.
var modelsChanged atomic.Uint64

// modelList is an engine's models, written by its actor and read by placement.
type modelList struct{ p atomic.Pointer[[]string] }

func (m *modelList) Load() *[]string { return m.p.Load() }

// Store replaces the list. The count moves after the list, so a candidate list made from the
// old one carries an older count and is remade.
func (m *modelList) Store(ms *[]string) {
	m.p.Store(ms)
	modelsChanged.Add(1)
}

func PackSlots(prefill, decode uint32) uint64 { return uint64(prefill)<<32 | uint64(decode) }

func unpackSlots(v uint64) (prefill, decode uint32) { return uint32(v >> 32), uint32(v) }

// Reserved returns the reservations held per phase.
func (v *Engine) Reserved() (prefill, decode int) {
	p, d := unpackSlots(v.Slots.Load())
	return int(p), int(d)
}

// Load is the reservations held in both phases.
func (v *Engine) Load() int {
	p, d := v.Reserved()
	return p + d
}

// Reserve takes a slot in phase unless the engine is out of placement or at max_inflight.
func (v *Engine) Reserve(phase fault.Phase) bool {
	for {
		cur := v.Slots.Load()
		p, d := unpackSlots(cur)
		if !v.Placeable.Load() || (v.MaxInflight > 0 && int(p+d) >= v.MaxInflight) {
			return false
		}
		if phase == fault.PhasePrefill {
			p++
		} else {
			d++
		}
		if v.Slots.CompareAndSwap(cur, PackSlots(p, d)) {
			break
		}
	}
	// The engine actor marks a leaving engine removed, then waits for its slots to reach zero;
	// a slot is taken, then removed is read. Either this reads removed and gives the slot back,
	// or the actor sees the slot and waits for it: no slot outlives the engine's drain.
	if v.Removed.Load() {
		v.Release(phase)
		return false
	}
	return true
}

// Release returns a slot taken with reserve, reporting whether the engine was full before.
func (v *Engine) Release(phase fault.Phase) (wasFull bool) {
	for {
		cur := v.Slots.Load()
		p, d := unpackSlots(cur)
		wasFull = v.MaxInflight > 0 && int(p+d) >= v.MaxInflight
		if phase == fault.PhasePrefill {
			p--
		} else {
			d--
		}
		if v.Slots.CompareAndSwap(cur, PackSlots(p, d)) {
			return wasFull
		}
	}
}

// Serves says whether the engine serves model: one of its models, or a LoRA adapter it lists.
func (v *Engine) Serves(model string) bool {
	if p := v.Models.Load(); p != nil && slices.Contains(*p, model) {
		return true
	}
	return v.hasAdapter(model)
}

func (v *Engine) FirstModel() string {
	if p := v.Models.Load(); p != nil && len(*p) > 0 {
		return (*p)[0]
	}
	return ""
}

func (v *Engine) HasRoom() bool {
	return v.MaxInflight == 0 || v.Load() < v.MaxInflight
}

func (v *Engine) CanServe(p fault.Phase) bool {
	if p == fault.PhasePrefill {
		return v.Role.CanPrefill()
	}
	return v.Role.CanDecode()
}
