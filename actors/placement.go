package actors

import (
	"math"
	"math/rand/v2"
	"strings"
	"sync"
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
	// What placement reads of every candidate comes first, so that a walk over the candidates
	// (sift) reads one cache line of each engine.
	Slots     atomic.Uint64 // reservations held: prefill in the high 32 bits, decode in the low
	Placeable atomic.Bool   // admitted: neither joining, quarantined nor ejected
	// PrefillTokens is the estimated prompt tokens of the prefill reservations held: a
	// producer's load is its work, and prompts differ a hundredfold in length.
	PrefillTokens atomic.Int64
	// Scraped is the last /metrics scrape (placement.scrape_interval_s), written by its scraper.
	Scraped     atomic.Pointer[loadSample]
	MaxInflight int
	// Pushback is the engine's backpressure record (backpressure.go).
	Pushback pushback

	Idx    int // the engine's prefix-index slot (its bit), -1 when it has none
	Name   string
	Role   config.Role
	Client *transport.EngineClient
	pid    *actor.PID

	Models modelList
	// State is the engine's lifecycle State as the engine actor publishes it (breakerState),
	// for readiness's reasons.
	State atomic.Uint32
	// Removed is set by the engine actor when the engine leaves the fleet: reserve refuses it
	// from then on, even to a supervisor that picked the engine from an older snapshot.
	Removed atomic.Bool
	Streak  atomic.Int32 // the breaker's failure streak, so a success is reported only if it matters
	// TakesOut is the consequence of the next counted failure, as the engine actor publishes it:
	// true when that failure quarantines or ejects the engine (breaker.TakesOut).
	TakesOut atomic.Bool
	// LocalTokens is the estimated uncached prompt tokens of the local decodes placed on this
	// consumer that have not produced their first token: the prompts it is computing for us.
	LocalTokens atomic.Int64
	// Rate is the engine's measured prefill Rate (ttft.go), as a producer or computing a local
	// decode's prompt.
	Rate rateEWMA

	// Commits counts the requests that committed with the engine as their consumer or producer,
	// and lastCommit is the newest one's time (unix nanoseconds): the evidence the blame board
	// (blameboard.go) reads that the engine serves other requests. Supervisors write them.
	Commits    atomic.Uint64
	LastCommit atomic.Int64
	// Suspect, while in the future (unix nanoseconds), says the blame board holds the
	// producer's handoffs responsible for failures on two or more consumers: a consumer's
	// probe picks another partner.
	Suspect atomic.Int64
}

// modelsChanged counts changes to any engine's model list: a snapshot's candidate lists
// (fleetSnapshot.candidates) were made under one count and are remade once it moves. Model
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

func packSlots(prefill, decode uint32) uint64 { return uint64(prefill)<<32 | uint64(decode) }

func unpackSlots(v uint64) (prefill, decode uint32) { return uint32(v >> 32), uint32(v) }

// Reserved returns the reservations held per phase.
func (v *engineView) Reserved() (prefill, decode int) {
	p, d := unpackSlots(v.Slots.Load())
	return int(p), int(d)
}

// Load is the reservations held in both phases.
func (v *engineView) Load() int {
	p, d := v.Reserved()
	return p + d
}

// Reserve takes a slot in phase unless the engine is out of placement or at max_inflight.
func (v *engineView) Reserve(phase fault.Phase) bool {
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
		if v.Slots.CompareAndSwap(cur, packSlots(p, d)) {
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
func (v *engineView) Release(phase fault.Phase) (wasFull bool) {
	for {
		cur := v.Slots.Load()
		p, d := unpackSlots(cur)
		wasFull = v.MaxInflight > 0 && int(p+d) >= v.MaxInflight
		if phase == fault.PhasePrefill {
			p--
		} else {
			d--
		}
		if v.Slots.CompareAndSwap(cur, packSlots(p, d)) {
			return wasFull
		}
	}
}

func (v *engineView) Serves(model string) bool {
	p := v.Models.Load()
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

func (v *engineView) FirstModel() string {
	if p := v.Models.Load(); p != nil && len(*p) > 0 {
		return (*p)[0]
	}
	return ""
}

func (v *engineView) HasRoom() bool {
	return v.MaxInflight == 0 || v.Load() < v.MaxInflight
}

func (v *engineView) CanServe(p fault.Phase) bool {
	if p == fault.PhasePrefill {
		return v.Role.CanPrefill()
	}
	return v.Role.CanDecode()
}

// fleet is the engines placement may use, as an immutable snapshot swapped whole when the
// fleet changes: a supervisor loads it once per placement and reads it without a lock, the
// pool (the only writer) publishes a new one for every change. The prefix index and the round
// robin positions outlive the snapshots.
type fleet struct {
	cur   atomic.Pointer[fleetSnapshot]
	Index *prefixIndex
	rr    [2]atomic.Uint64 // round robin position per phase
}

// Load is the fleet as it is now.
func (f *fleet) Load() *fleetSnapshot { return f.cur.Load() }

// Publish makes engines (in their sources' order) the fleet placement sees.
func (f *fleet) Publish(engines []*engineView) {
	s := &fleetSnapshot{Engines: engines, byName: make(map[string]*engineView, len(engines)), Index: f.Index, rr: &f.rr}
	slots := 0
	for _, v := range engines {
		s.byName[v.Name] = v
		if v.Idx >= 0 && v.Idx < maxIndexed {
			slots = max(slots, v.Idx+1)
		}
	}
	s.bySlot = make([]int32, slots)
	for i, v := range engines {
		if v.Idx >= 0 && v.Idx < maxIndexed {
			s.bySlot[v.Idx] = int32(i + 1)
		}
		for _, p := range []fault.Phase{fault.PhasePrefill, fault.PhaseDecode} {
			if v.CanServe(p) {
				s.byPhase[p] = append(s.byPhase[p], v)
			}
		}
	}
	f.cur.Store(s)
}

// fleetSnapshot is the fleet at one moment: every engine added and not removed (joining,
// admitted, out of placement), in their sources' order. It is never modified, but for lists
// derived from it (candidates), made when first asked for.
type fleetSnapshot struct {
	Engines []*engineView
	byName  map[string]*engineView
	// byPhase are the engines whose role runs each phase, and bySlot the position in engines
	// plus one of the engine holding each prefix index slot (0: none), so that placement reads
	// only the engines a leg can use and the index names.
	byPhase [2][]*engineView
	bySlot  []int32
	lists   atomic.Pointer[candidateLists]
	Index   *prefixIndex
	rr      *[2]atomic.Uint64
}

// candidateLists are the engines able to run a phase of a model, per (phase, model) asked for,
// as they were when modelsChanged stood at gen.
type candidateLists struct {
	gen uint64
	m   map[candidateKey][]*engineView
}

type candidateKey struct {
	Phase fault.Phase
	Model string
}

func (f *fleetSnapshot) Engine(name string) *engineView { return f.byName[name] }

// Candidates are the engines whose role runs phase and which serve model, in the snapshot's
// order: made by one walk of the fleet, then kept until an engine's models change. A model no
// engine serves is not kept, so requests naming arbitrary models cannot grow the lists.
func (f *fleetSnapshot) Candidates(phase fault.Phase, model string) []*engineView {
	gen := modelsChanged.Load()
	c := f.lists.Load()
	k := candidateKey{phase, model}
	if c != nil && c.gen == gen {
		if l, ok := c.m[k]; ok {
			return l
		}
	}
	var l []*engineView
	for _, v := range f.byPhase[phase] {
		if v.Serves(model) {
			l = append(l, v)
		}
	}
	if len(l) == 0 {
		return nil
	}
	// The key keeps a copy of the name: keeping the caller's would make every ask escape.
	n := &candidateLists{gen: gen, m: map[candidateKey][]*engineView{{phase, strings.Clone(model)}: l}}
	if c != nil && c.gen == gen {
		for ck, cl := range c.m {
			n.m[ck] = cl
		}
	}
	// Two placements racing here may each drop the other's new list; it is made again.
	f.lists.Store(n)
	return l
}

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
	// Avoid lists engines to use only if nothing else can serve (a failed engine on retry; the
	// other leg's engine); Full lists engines that just refused a slot; Exclude lists engines
	// never to use.
	Avoid, Full, Exclude []string
	// Blocks are the prompt's block hashes, for prefix preference; tokens its token estimate,
	// the request's weight on a producer.
	Blocks []uint64
	Tokens int
	// Rules are the placement settings the request runs with (placement.*).
	Rules *config.FleetRuntime
}

// placed is a leg's placement: the engine, or why there is none; match is the number of the
// prompt's leading blocks the prefix index says the engine served.
type placed struct {
	Engine *engineView
	Why    scarcity
	Match  int
}

// Pick chooses an engine for phase by power of two choices on load (pickFor without a prompt).
func (f *fleetSnapshot) Pick(rules *config.FleetRuntime, phase fault.Phase, model string, avoid, full, exclude []string) (*engineView, scarcity) {
	p := f.Place(ask{phase: phase, model: model, Avoid: avoid, Full: full, Exclude: exclude, Rules: rules}, nil)
	return p.Engine, p.Why
}

// tier is how a candidate engine stands for one leg. The candidates are the engines of the
// first tier that has any: those preferred, else the avoided ones, else the ones backpressuring
// for longer than recovery.backpressure.bound_s (used only when no other engine can take the
// leg).
type tier uint8

const (
	preferred tier = iota
	avoided
	passedOver
	ineligible
)

// marks are an ask's avoid, full and exclude lists as the snapshot's engines, so that testing
// an engine is a pointer comparison (a name the snapshot does not hold marks nothing). The
// lists name an engine or two; past len(v) the names are compared instead.
type marks struct {
	n    int
	v    [8]*engineView
	kind [8]markKind
	// names are the lists, read instead when over: more marks than v holds.
	names [3][]string
	over  bool
}

type markKind uint8

const (
	markAvoid markKind = iota
	markFull
	markExclude
)

func (f *fleetSnapshot) marksOf(a *ask) (mk marks) {
	mk.names = [...][]string{markAvoid: a.Avoid, markFull: a.Full, markExclude: a.Exclude}
	for k, names := range mk.names {
		for _, name := range names {
			v := f.byName[name]
			if v == nil {
				continue
			}
			if mk.n == len(mk.v) {
				mk.over = true
				return mk
			}
			mk.v[mk.n], mk.kind[mk.n] = v, markKind(k)
			mk.n++
		}
	}
	return mk
}

// has says whether v is on the list of kind k.
func (mk *marks) has(v *engineView, k markKind) bool {
	if mk.over {
		return contains(mk.names[k], v.Name)
	}
	for i := range mk.n {
		if mk.v[i] == v && mk.kind[i] == k {
			return true
		}
	}
	return false
}

// classify is v's tier for a leg (v runs its phase and model), and for an ineligible engine why:
// out of placement or excluded (503), full or just refused a slot (queue).
func classify(v *engineView, mk *marks, now time.Time) (tier, scarcity) {
	switch {
	case !v.Placeable.Load() || mk.has(v, markExclude):
		return ineligible, noAdmitted
	case !v.HasRoom() || mk.has(v, markFull):
		return ineligible, noRoom
	case v.Pushback.passedOver(now):
		return passedOver, available
	case mk.has(v, markAvoid):
		return avoided, available
	}
	return preferred, available
}

// Place chooses an engine for a leg under placement.policy:
//
//   - prefix: among the candidates under the load bound (load + 1 ≤ ⌈load_factor × (total
//     load + 1) / candidates⌉, consistent hashing with bounded loads' rule), the one with the
//     longest prefix match, the lower load on a tie; with no match under the bound, p2c;
//   - p2c: two random candidates, the less loaded wins, a tie goes to the first (random);
//   - round_robin: the next candidate in configuration order.
//
// The candidates are the engines of the first tier (see tier) that has any. A decision reads
// only the engines that run the leg's phase and model (candidates); p2c reads only the two it
// draws while draws find them (drawTwo); prefix reads each of them once for the load bound's
// total (tally), then only the engines the index matched. The reason there is no candidate
// comes from a walk over them all, as before.
func (f *fleetSnapshot) Place(a ask, m *telemetry.Metrics) placed {
	list := f.Candidates(a.phase, a.model)
	if len(list) == 0 {
		return placed{Why: unknownModel}
	}
	mk := f.marksOf(&a)
	now := time.Now()
	if a.Rules.Placement == config.PlacePrefix && f.Index != nil && len(a.Blocks) > 0 {
		return f.pickByPrefix(list, &a, &mk, now, m)
	}
	if a.Rules.Placement != config.PlaceRoundRobin {
		if v := f.drawTwo(list, &a, &mk, now, preferred, math.MaxInt); v != nil {
			return placed{Engine: v, Match: f.matchOf(v, a.Blocks)}
		}
	}
	sc := scratchPool.Get().(*scratch)
	defer scratchPool.Put(sc)
	cands, why := sc.sift(list, &mk, now)
	switch len(cands) {
	case 0:
		return placed{Why: why}
	case 1:
		return placed{Engine: cands[0], Match: f.matchOf(cands[0], a.Blocks)}
	}
	var v *engineView
	if a.Rules.Placement == config.PlaceRoundRobin {
		v = cands[int(f.rr[a.phase].Add(1)%uint64(len(cands)))]
	} else {
		v = f.eitherOf(cands, &a, now)
	}
	return placed{Engine: v, Match: f.matchOf(v, a.Blocks)}
}

// pickByPrefix is pickFor under placement.policy prefix for a prompt.
func (f *fleetSnapshot) pickByPrefix(list []*engineView, a *ask, mk *marks, now time.Time, m *telemetry.Metrics) placed {
	t, n, total, least, leastLoad, why := f.tally(list, a, mk, now)
	switch n {
	case 0:
		return placed{Why: why}
	case 1:
		return placed{Engine: least, Match: f.matchOf(least, a.Blocks)}
	}
	sc := scratchPool.Get().(*scratch)
	defer scratchPool.Put(sc)
	match := f.Index.match(a.Blocks, sc.match[:0])
	sc.match = match
	// Only engines under the bound are candidates, for their cache or, failing a match among
	// them, for p2c: the bound holds whichever way the choice goes. When none is under it (a
	// prefill heavier than the bound allows anywhere), the least loaded alone is.
	w := a.weight()
	limit := int(math.Ceil(a.Rules.LoadFactor * float64(total+w) / float64(n)))
	noneUnder := leastLoad+w > limit
	if match.longest() > 0 {
		if v, n := f.longest(match, a, mk, now, t, limit, noneUnder, least); v != nil {
			countPrefix(m, a.phase, "hit")
			return placed{Engine: v, Match: n}
		}
		countPrefix(m, a.phase, "bounded")
	} else {
		countPrefix(m, a.phase, "miss")
	}
	if noneUnder {
		return placed{Engine: least, Match: matchIn(match, least)}
	}
	v := f.drawTwo(list, a, mk, now, t, limit-w)
	if v == nil {
		under := sc.under[:0]
		for _, c := range list {
			if tierOf(c, mk, now) == t && f.loadOf(c, a, now)+w <= limit {
				under = append(under, c)
			}
		}
		sc.under = under
		switch len(under) {
		case 0: // the loads moved under us since tally: the least loaded then
			v = least
		case 1:
			v = under[0]
		default:
			v = f.eitherOf(under, a, now)
		}
	}
	return placed{Engine: v, Match: matchIn(match, v)}
}

// eitherOf is power of two choices among cands (two or more): two distinct at random, the less
// loaded, the first on a tie.
func (f *fleetSnapshot) eitherOf(cands []*engineView, a *ask, now time.Time) *engineView {
	i := rand.IntN(len(cands))
	j := rand.IntN(len(cands) - 1)
	if j >= i {
		j++
	}
	v, b := cands[i], cands[j]
	if f.loadOf(b, a, now) < f.loadOf(v, a, now) {
		return b
	}
	return v
}

// maxDraws is how many random engines drawTwo reads before leaving the choice to a walk over
// the candidates: with half of them eligible, sixteen draws find two with odds of 1 − 17/2¹⁶.
const maxDraws = 16

// drawTwo is power of two choices among the engines of list in tier t whose load is at most
// max, by drawing from list until two distinct such engines come up; nil when maxDraws do not
// find them. Rejecting the others leaves each pair of eligible engines as likely as drawing
// among them directly.
func (f *fleetSnapshot) drawTwo(list []*engineView, a *ask, mk *marks, now time.Time, t tier, max int) *engineView {
	if len(list) < 2 {
		return nil
	}
	var first *engineView
	firstLoad := 0
	for range maxDraws {
		v := list[rand.IntN(len(list))]
		if v == first || tierOf(v, mk, now) != t {
			continue
		}
		l := f.loadOf(v, a, now)
		if l > max {
			continue
		}
		if first == nil {
			first, firstLoad = v, l
			continue
		}
		if l < firstLoad {
			return v
		}
		return first
	}
	return nil
}

// scratch is one placement's working lists, kept in scratchPool so that a walk over a thousand
// engines allocates nothing.
type scratch struct {
	tiers [ineligible][]*engineView
	under []*engineView
	match prefixMatches
}

var scratchPool = sync.Pool{New: func() any { return new(scratch) }}

// sift walks list and returns the candidates (the first tier that has any), or why there are
// none.
func (sc *scratch) sift(list []*engineView, mk *marks, now time.Time) ([]*engineView, scarcity) {
	worst := unknownModel
	for t := range sc.tiers {
		sc.tiers[t] = sc.tiers[t][:0]
	}
	for _, v := range list {
		t, why := classify(v, mk, now)
		if t == ineligible {
			worst = min(worst, why)
			continue
		}
		sc.tiers[t] = append(sc.tiers[t], v)
	}
	for t := range sc.tiers {
		if len(sc.tiers[t]) > 0 {
			return sc.tiers[t], available
		}
	}
	return nil, worst
}

// tally walks list for the load bound: the candidates' tier t and number n, their total load,
// the least loaded (the first on a tie) and its load; or why there are none (n = 0).
func (f *fleetSnapshot) tally(list []*engineView, a *ask, mk *marks, now time.Time) (t tier, n, total int, least *engineView, leastLoad int, why scarcity) {
	var count, sum, minLoad [ineligible]int
	var minOf [ineligible]*engineView
	why = unknownModel
	for _, v := range list {
		vt, reason := classify(v, mk, now)
		if vt == ineligible {
			why = min(why, reason)
			continue
		}
		l := f.loadOf(v, a, now)
		if count[vt] == 0 || l < minLoad[vt] {
			minOf[vt], minLoad[vt] = v, l
		}
		count[vt]++
		sum[vt] += l
	}
	for t := range tier(ineligible) {
		if count[t] > 0 {
			return t, count[t], sum[t], minOf[t], minLoad[t], available
		}
	}
	return ineligible, 0, 0, nil, 0, why
}

func tierOf(v *engineView, mk *marks, now time.Time) tier {
	t, _ := classify(v, mk, now)
	return t
}

// LoadFor is v's load as a's placement weighs it: for a decode its load score (requests), for
// a prefill the prompt tokens it is computing for us, plus one request's worth (a's prompt) per
// request a fresh scrape shows beyond our reservations there (another router's, say). Our own
// requests are not counted twice: they are in the prompt tokens already, and counting each
// scraped request at a's size would make a producer holding a few long prompts look lighter
// than one holding many short ones, and draw every long prompt to it.
func (f *fleetSnapshot) LoadFor(v *engineView, a ask, now time.Time) int {
	return f.loadOf(v, &a, now)
}

// loadOf is loadFor without copying a, for the walks over every candidate.
func (f *fleetSnapshot) loadOf(v *engineView, a *ask, now time.Time) int {
	if a.phase != fault.PhasePrefill {
		return v.loadScore(now, a.Rules.ScrapeStale)
	}
	n := int(v.PrefillTokens.Load())
	if l, ok := v.fresh(now, a.Rules.ScrapeStale); ok {
		if other := l.Running + l.Waiting - v.Load(); other > 0 {
			n += other * max(1, a.Tokens)
		}
	}
	return n
}

// weight is what a's request adds to the engine's load.
func (a ask) weight() int {
	if a.phase == fault.PhasePrefill {
		return max(1, a.Tokens)
	}
	return 1
}

// longest returns the candidate of tier t with the longest match (at least one block) whose
// load plus this request stays within limit, the less loaded on a tie, then the first in the
// snapshot's order; or nil. It reads only the engines match names. When no candidate is under
// the limit, least alone is.
func (f *fleetSnapshot) longest(match prefixMatches, a *ask, mk *marks, now time.Time, t tier, limit int, noneUnder bool, least *engineView) (*engineView, int) {
	var best *engineView
	bestMatch, bestLoad, bestPos := 0, 0, int32(0)
	w := a.weight()
	for _, e := range match {
		n := int(e.depth)
		if n == 0 || n < bestMatch || int(e.slot) >= len(f.bySlot) || f.bySlot[e.slot] == 0 {
			continue
		}
		pos := f.bySlot[e.slot]
		v := f.Engines[pos-1]
		if !v.CanServe(a.phase) || !v.Serves(a.model) || tierOf(v, mk, now) != t {
			continue
		}
		l := f.loadOf(v, a, now)
		if noneUnder && v != least || !noneUnder && l+w > limit {
			continue
		}
		if n > bestMatch || l < bestLoad || (l == bestLoad && pos < bestPos) {
			best, bestMatch, bestLoad, bestPos = v, n, l, pos
		}
	}
	return best, bestMatch
}

// matchIn is v's match in a prompt's matches.
func matchIn(match prefixMatches, v *engineView) int {
	if v.Idx < 0 || v.Idx >= maxIndexed {
		return 0
	}
	return match.of(v.Idx)
}

func countPrefix(m *telemetry.Metrics, phase fault.Phase, result string) {
	if m != nil {
		m.PrefixPlacement(phase.String(), result)
	}
}

// matchOf is how many of blocks the prefix index says v served.
func (f *fleetSnapshot) matchOf(v *engineView, blocks []uint64) int {
	if f.Index == nil || len(blocks) == 0 || v.Idx < 0 || v.Idx >= maxIndexed {
		return 0
	}
	var mbuf [32]slotDepth
	return f.Index.match(blocks, mbuf[:0]).of(v.Idx)
}

// AnyAdmitted returns an admitted engine able to run phase, other than not, or nil; one that
// serves model is preferred.
func (f *fleetSnapshot) AnyAdmitted(phase fault.Phase, not *engineView, model string) *engineView {
	var other *engineView
	for _, v := range f.Engines {
		if v != not && v.CanServe(phase) && v.Placeable.Load() {
			if model == "" || v.Serves(model) {
				return v
			}
			if other == nil {
				other = v
			}
		}
	}
	return other
}

// Models is the union of the Models the fleet's engines serve, for GET /v1/Models.
func (f *fleetSnapshot) Models() []string {
	seen := map[string]bool{}
	var out []string
	for _, v := range f.Engines {
		if p := v.Models.Load(); p != nil {
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
