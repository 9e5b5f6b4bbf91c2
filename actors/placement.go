package actors

import (
	"math"
	"math/rand/v2"
	"sync/atomic"
	"time"

	"github.com/asynkron/protoactor-go/actor"

	"github.com/narwhal-router/narwhal/config"
	"github.com/narwhal-router/narwhal/transport"
	"github.com/narwhal-router/narwhal/transport/fault"
	"github.com/narwhal-router/narwhal/transport/telemetry"
)

// engineView is an engine as placement sees it, shared by every request supervisor. Its phase
// reservations are taken and returned by supervisors with a compare-and-swap, bounded by
// max_inflight: a slot costs no message, because a round trip to the engine actor is two
// goroutine hand-offs per phase per request (bench/README.md has the measurements). Everything
// else here — placeability, the failure streak, the models — is written by the engine actor
// alone and only read by others.
type engineView struct {
	idx         int // the engine's prefix-index slot (its bit), -1 when it has none
	name        string
	role        config.Role
	maxInflight int
	client      *transport.EngineClient
	pid         *actor.PID

	models    atomic.Pointer[[]string]
	slots     atomic.Uint64 // reservations held: prefill in the high 32 bits, decode in the low
	placeable atomic.Bool   // admitted: neither joining, quarantined nor ejected
	// state is the engine's lifecycle state as the engine actor publishes it (breakerState),
	// for readiness's reasons.
	state atomic.Uint32
	// removed is set by the engine actor when the engine leaves the fleet: reserve refuses it
	// from then on, even to a supervisor that picked the engine from an older snapshot.
	removed atomic.Bool
	streak  atomic.Int32 // the breaker's failure streak, so a success is reported only if it matters
	// takesOut is the consequence of the next counted failure, as the engine actor publishes it:
	// true when that failure quarantines or ejects the engine (breaker.takesOut).
	takesOut atomic.Bool
	// scraped is the last /metrics scrape (placement.scrape_interval_s), written by its scraper.
	scraped atomic.Pointer[loadSample]
	// prefillTokens is the estimated prompt tokens of the prefill reservations held: a
	// producer's load is its work, and prompts differ a hundredfold in length.
	prefillTokens atomic.Int64
	// localTokens is the estimated uncached prompt tokens of the local decodes placed on this
	// consumer that have not produced their first token: the prompts it is computing for us.
	localTokens atomic.Int64
	// rate is the engine's measured prefill rate (ttft.go), as a producer or computing a local
	// decode's prompt.
	rate rateEWMA

	// commits counts the requests that committed with the engine as their consumer or producer,
	// and lastCommit is the newest one's time (unix nanoseconds): the evidence the blame board
	// (blameboard.go) reads that the engine serves other requests. Supervisors write them.
	commits    atomic.Uint64
	lastCommit atomic.Int64
	// suspect, while in the future (unix nanoseconds), says the blame board holds the
	// producer's handoffs responsible for failures on two or more consumers: a consumer's
	// probe picks another partner.
	suspect atomic.Int64
	// pushback is the engine's backpressure record (backpressure.go).
	pushback pushback
}

func packSlots(prefill, decode uint32) uint64 { return uint64(prefill)<<32 | uint64(decode) }

func unpackSlots(v uint64) (prefill, decode uint32) { return uint32(v >> 32), uint32(v) }

// reserved returns the reservations held per phase.
func (v *engineView) reserved() (prefill, decode int) {
	p, d := unpackSlots(v.slots.Load())
	return int(p), int(d)
}

// load is the reservations held in both phases.
func (v *engineView) load() int {
	p, d := v.reserved()
	return p + d
}

// reserve takes a slot in phase unless the engine is out of placement or at max_inflight.
func (v *engineView) reserve(phase fault.Phase) bool {
	for {
		cur := v.slots.Load()
		p, d := unpackSlots(cur)
		if !v.placeable.Load() || (v.maxInflight > 0 && int(p+d) >= v.maxInflight) {
			return false
		}
		if phase == fault.PhasePrefill {
			p++
		} else {
			d++
		}
		if v.slots.CompareAndSwap(cur, packSlots(p, d)) {
			break
		}
	}
	// The engine actor marks a leaving engine removed, then waits for its slots to reach zero;
	// a slot is taken, then removed is read. Either this reads removed and gives the slot back,
	// or the actor sees the slot and waits for it: no slot outlives the engine's drain.
	if v.removed.Load() {
		v.release(phase)
		return false
	}
	return true
}

// release returns a slot taken with reserve, reporting whether the engine was full before.
func (v *engineView) release(phase fault.Phase) (wasFull bool) {
	for {
		cur := v.slots.Load()
		p, d := unpackSlots(cur)
		wasFull = v.maxInflight > 0 && int(p+d) >= v.maxInflight
		if phase == fault.PhasePrefill {
			p--
		} else {
			d--
		}
		if v.slots.CompareAndSwap(cur, packSlots(p, d)) {
			return wasFull
		}
	}
}

func (v *engineView) serves(model string) bool {
	p := v.models.Load()
	if p == nil {
		return false
	}
	for _, m := range *p {
		if m == model {
			return true
		}
	}
	return false
}

func (v *engineView) firstModel() string {
	if p := v.models.Load(); p != nil && len(*p) > 0 {
		return (*p)[0]
	}
	return ""
}

func (v *engineView) hasRoom() bool {
	return v.maxInflight == 0 || v.load() < v.maxInflight
}

func (v *engineView) canServe(p fault.Phase) bool {
	if p == fault.PhasePrefill {
		return v.role.CanPrefill()
	}
	return v.role.CanDecode()
}

// fleet is the engines placement may use, as an immutable snapshot swapped whole when the
// fleet changes: a supervisor loads it once per placement and reads it without a lock, the
// pool (the only writer) publishes a new one for every change. The prefix index and the round
// robin positions outlive the snapshots.
type fleet struct {
	cur   atomic.Pointer[fleetSnapshot]
	index *prefixIndex
	rr    [2]atomic.Uint64 // round robin position per phase
}

// load is the fleet as it is now.
func (f *fleet) load() *fleetSnapshot { return f.cur.Load() }

// publish makes engines (in their sources' order) the fleet placement sees.
func (f *fleet) publish(engines []*engineView) {
	s := &fleetSnapshot{engines: engines, byName: make(map[string]*engineView, len(engines)), index: f.index, rr: &f.rr}
	for _, v := range engines {
		s.byName[v.name] = v
	}
	f.cur.Store(s)
}

// fleetSnapshot is the fleet at one moment: every engine added and not removed (joining,
// admitted, out of placement), in their sources' order. It is never modified.
type fleetSnapshot struct {
	engines []*engineView
	byName  map[string]*engineView
	index   *prefixIndex
	rr      *[2]atomic.Uint64
}

func (f *fleetSnapshot) engine(name string) *engineView { return f.byName[name] }

// scarcity says why no candidate could be found, worst first.
type scarcity uint8

const (
	available    scarcity = iota
	noRoom                // engines serve the model but all are full: queue
	noAdmitted            // engines serve the model but none is admitted: 503
	unknownModel          // no engine serves the model at all: 404
)

// ask is one leg's placement question.
type ask struct {
	phase fault.Phase
	model string
	// avoid lists engines to use only if nothing else can serve (a failed engine on retry; the
	// other leg's engine); full lists engines that just refused a slot; exclude lists engines
	// never to use.
	avoid, full, exclude []string
	// blocks are the prompt's block hashes, for prefix preference; tokens its token estimate,
	// the request's weight on a producer.
	blocks []uint64
	tokens int
	// rules are the placement settings the request runs with (placement.*).
	rules *config.FleetRuntime
}

// placed is a leg's placement: the engine, or why there is none; match is the number of the
// prompt's leading blocks the prefix index says the engine served.
type placed struct {
	engine *engineView
	why    scarcity
	match  int
}

// pick chooses an engine for phase by power of two choices on load (pickFor without a prompt).
func (f *fleetSnapshot) pick(rules *config.FleetRuntime, phase fault.Phase, model string, avoid, full, exclude []string) (*engineView, scarcity) {
	p := f.pickFor(ask{phase: phase, model: model, avoid: avoid, full: full, exclude: exclude, rules: rules}, nil)
	return p.engine, p.why
}

// pickFor chooses an engine for a leg under placement.policy:
//
//   - prefix: among the candidates under the load bound (load + 1 ≤ ⌈load_factor × (total
//     load + 1) / candidates⌉, consistent hashing with bounded loads' rule), the one with the
//     longest prefix match, the lower load on a tie; with no match under the bound, p2c;
//   - p2c: two random candidates, the less loaded wins, a tie goes to the first (random);
//   - round_robin: the next candidate in configuration order.
func (f *fleetSnapshot) pickFor(a ask, m *telemetry.Metrics) placed {
	var buf [32]*engineView
	cands := buf[:0]
	var preferred [32]*engineView
	pref := preferred[:0]
	worst := unknownModel
	now := time.Now()
	var busy [32]*engineView
	backpressured := busy[:0]
	for _, v := range f.engines {
		if !v.canServe(a.phase) || !v.serves(a.model) {
			continue
		}
		if !v.placeable.Load() || contains(a.exclude, v.name) {
			worst = min(worst, noAdmitted)
			continue
		}
		if !v.hasRoom() || contains(a.full, v.name) {
			worst = min(worst, noRoom)
			continue
		}
		switch {
		case v.pushback.passedOver(now):
			// Backpressuring for longer than recovery.backpressure.bound_s: used only when no
			// other engine can take the leg.
			backpressured = append(backpressured, v)
			continue
		case !contains(a.avoid, v.name):
			pref = append(pref, v)
		}
		cands = append(cands, v)
	}
	switch {
	case len(pref) > 0:
		cands = pref
	case len(cands) == 0:
		cands = backpressured
	}
	switch len(cands) {
	case 0:
		return placed{why: worst}
	case 1:
		return placed{engine: cands[0], match: f.matchOf(cands[0], a.blocks)}
	}
	switch a.rules.Placement {
	case config.PlaceRoundRobin:
		v := cands[int(f.rr[a.phase].Add(1)%uint64(len(cands)))]
		return placed{engine: v, match: f.matchOf(v, a.blocks)}
	case config.PlacePrefix:
		if f.index != nil && len(a.blocks) > 0 {
			var mbuf [32]slotDepth
			match := f.index.match(a.blocks, mbuf[:0])
			hit := match.longest() > 0
			// Only engines under the bound are candidates, for their cache or, failing a match
			// among them, for p2c: the bound holds whichever way the choice goes.
			var under [32]*engineView
			cands = f.underBound(cands, under[:0], a, now)
			if hit {
				if v, n := f.longest(cands, match, a, now); v != nil {
					countPrefix(m, a.phase, "hit")
					return placed{engine: v, match: n}
				}
				countPrefix(m, a.phase, "bounded")
			} else {
				countPrefix(m, a.phase, "miss")
			}
			if len(cands) == 1 {
				return placed{engine: cands[0], match: f.matchOf(cands[0], a.blocks)}
			}
		}
	}
	i := rand.IntN(len(cands))
	j := rand.IntN(len(cands) - 1)
	if j >= i {
		j++
	}
	v, b := cands[i], cands[j]
	if f.loadFor(b, a, now) < f.loadFor(v, a, now) {
		v = b
	}
	return placed{engine: v, match: f.matchOf(v, a.blocks)}
}

// loadFor is v's load as a's placement weighs it: for a decode its load score (requests), for
// a prefill the prompt tokens it is computing for us, plus one request's worth (a's prompt) per
// request a fresh scrape shows beyond our reservations there (another router's, say). Our own
// requests are not counted twice: they are in the prompt tokens already, and counting each
// scraped request at a's size would make a producer holding a few long prompts look lighter
// than one holding many short ones, and draw every long prompt to it.
func (f *fleetSnapshot) loadFor(v *engineView, a ask, now time.Time) int {
	if a.phase != fault.PhasePrefill {
		return v.loadScore(now, a.rules.ScrapeStale)
	}
	n := int(v.prefillTokens.Load())
	if l, ok := v.fresh(now, a.rules.ScrapeStale); ok {
		if other := l.Running + l.Waiting - v.load(); other > 0 {
			n += other * max(1, a.tokens)
		}
	}
	return n
}

// weight is what a's request adds to the engine's load.
func (a ask) weight() int {
	if a.phase == fault.PhasePrefill {
		return max(1, a.tokens)
	}
	return 1
}

// underBound appends to dst the candidates whose load plus this request stays within the bound
// load_factor × (total load + this request) / candidates (consistent hashing with bounded
// loads; for decodes, in whole requests, rounded up). When none does (a prefill heavier than
// the bound allows anywhere), the least loaded alone is.
func (f *fleetSnapshot) underBound(cands, dst []*engineView, a ask, now time.Time) []*engineView {
	var loads [32]int
	ls := loads[:0]
	total, w := 0, a.weight()
	least := 0
	for i, v := range cands {
		l := f.loadFor(v, a, now)
		ls = append(ls, l)
		total += l
		if l < ls[least] {
			least = i
		}
	}
	limit := int(math.Ceil(a.rules.LoadFactor * float64(total+w) / float64(len(cands))))
	for i, v := range cands {
		if ls[i]+w <= limit {
			dst = append(dst, v)
		}
	}
	if len(dst) == 0 {
		dst = append(dst, cands[least])
	}
	return dst
}

// longest returns the candidate with the longest match (at least one block), the less loaded
// on a tie, or nil.
func (f *fleetSnapshot) longest(cands []*engineView, match prefixMatches, a ask, now time.Time) (*engineView, int) {
	var best *engineView
	bestMatch, bestLoad := 0, 0
	for _, v := range cands {
		if v.idx < 0 || v.idx >= maxIndexed {
			continue
		}
		n := match.of(v.idx)
		if n == 0 {
			continue
		}
		l := f.loadFor(v, a, now)
		if n > bestMatch || (n == bestMatch && l < bestLoad) {
			best, bestMatch, bestLoad = v, n, l
		}
	}
	return best, bestMatch
}

func countPrefix(m *telemetry.Metrics, phase fault.Phase, result string) {
	if m != nil {
		m.PrefixPlacement(phase.String(), result)
	}
}

// matchOf is how many of blocks the prefix index says v served.
func (f *fleetSnapshot) matchOf(v *engineView, blocks []uint64) int {
	if f.index == nil || len(blocks) == 0 || v.idx < 0 || v.idx >= maxIndexed {
		return 0
	}
	var mbuf [32]slotDepth
	return f.index.match(blocks, mbuf[:0]).of(v.idx)
}

// anyAdmitted returns an admitted engine able to run phase, other than not, or nil; one that
// serves model is preferred.
func (f *fleetSnapshot) anyAdmitted(phase fault.Phase, not *engineView, model string) *engineView {
	var other *engineView
	for _, v := range f.engines {
		if v != not && v.canServe(phase) && v.placeable.Load() {
			if model == "" || v.serves(model) {
				return v
			}
			if other == nil {
				other = v
			}
		}
	}
	return other
}

// Models is the union of the models the fleet's engines serve, for GET /v1/models.
func (f *fleetSnapshot) models() []string {
	seen := map[string]bool{}
	var out []string
	for _, v := range f.engines {
		if p := v.models.Load(); p != nil {
			for _, m := range *p {
				if !seen[m] {
					seen[m] = true
					out = append(out, m)
				}
			}
		}
	}
	return out
}

func contains(list []string, s string) bool {
	for _, v := range list {
		if v == s {
			return true
		}
	}
	return false
}
