package placement

import (
	"maps"
	"math"
	"slices"
	"sync"
	"time"

	"github.com/narwhal-router/narwhal/config"
	"github.com/narwhal-router/narwhal/transport/fault"
)

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
	v    [8]*Engine
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

func (f *Snapshot) marksOf(a *Ask) (mk marks) {
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
func (mk *marks) has(v *Engine, k markKind) bool {
	if mk.over {
		return slices.Contains(mk.names[k], v.Name)
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
func classify(v *Engine, mk *marks, now time.Time) (tier, Scarcity) {
	switch {
	case !v.Placeable.Load() || mk.has(v, markExclude):
		return ineligible, NoAdmitted
	case !v.HasRoom() || mk.has(v, markFull):
		return ineligible, NoRoom
	case v.Pushback.PassedOver(now):
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
//
// On an engine of several data-parallel ranks, the rank is then chosen inside it (pickRank).
func (f *Snapshot) Place(a Ask) Placed {
	p := f.placeEngine(a)
	if p.Engine != nil && len(p.Engine.Ranks()) > 1 {
		now := a.Now
		if now.IsZero() {
			now = time.Now()
		}
		p.Rank, p.Match = f.pickRank(p.Engine, &a, now)
	}
	return p
}

// placeEngine is Place's choice of the engine.
func (f *Snapshot) placeEngine(a Ask) Placed {
	list := f.Candidates(a.Phase, a.Model)
	if len(list) == 0 {
		return Placed{Why: UnknownModel}
	}
	mk := f.marksOf(&a)
	now := a.Now
	if now.IsZero() {
		now = time.Now()
	}
	if a.Rules.LoRAAffinity && f.isAdapter(a.Model) {
		list = f.byAdapter(list, &a, &mk, now) // lora.go
	}
	if a.Rules.Placement == config.PlacePrefix && f.Index != nil && len(a.Blocks) > 0 {
		return f.pickByPrefix(list, &a, &mk, now)
	}
	if a.Rules.Placement != config.PlaceRoundRobin {
		if v := f.drawTwo(list, &a, &mk, now, preferred, math.MaxInt); v != nil {
			return Placed{Engine: v, Match: f.matchOf(v, a.Blocks)}
		}
	}
	sc := scratchPool.Get().(*scratch)
	defer scratchPool.Put(sc)
	cands, why := sc.sift(list, &mk, now)
	switch len(cands) {
	case 0:
		return Placed{Why: why}
	case 1:
		return Placed{Engine: cands[0], Match: f.matchOf(cands[0], a.Blocks)}
	}
	var v *Engine
	if a.Rules.Placement == config.PlaceRoundRobin {
		v = cands[int(f.rr[a.Phase].Add(1)%uint64(len(cands)))]
	} else {
		v = f.eitherOf(cands, &a, now)
	}
	return Placed{Engine: v, Match: f.matchOf(v, a.Blocks)}
}

// pickByPrefix is Place under placement.policy prefix for a prompt.
func (f *Snapshot) pickByPrefix(list []*Engine, a *Ask, mk *marks, now time.Time) Placed {
	t, n, total, least, leastLoad, why := f.tally(list, a, mk, now)
	switch n {
	case 0:
		return Placed{Why: why}
	case 1:
		return Placed{Engine: least, Match: f.matchOf(least, a.Blocks)}
	}
	sc := scratchPool.Get().(*scratch)
	defer scratchPool.Put(sc)
	match := f.Index.match(a.Blocks, sc.match[:0])
	sc.match = match
	// Only engines under the bound are candidates, for their cache or, failing a match among
	// them, for p2c: the bound holds whichever way the choice goes.
	limit := loadBound(a.Rules.LoadFactor, total, n)
	noneUnder := leastLoad > limit // only with load_factor under 1
	prefix := PrefixMiss
	if match.longest() > 0 {
		if v, n := f.longest(match, a, mk, now, t, limit, noneUnder, least); v != nil {
			return Placed{Engine: v, Match: n, Prefix: PrefixHit}
		}
		prefix = PrefixBounded
	}
	if noneUnder {
		return Placed{Engine: least, Match: matchIn(match, least), Prefix: prefix}
	}
	v := f.drawTwo(list, a, mk, now, t, limit)
	if v == nil {
		under := sc.under[:0]
		for _, c := range list {
			if tierOf(c, mk, now) == t && f.loadOf(c, a, now) <= limit {
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
	return Placed{Engine: v, Match: matchIn(match, v), Prefix: prefix}
}

// loadBound is the most load an engine may hold and still be chosen for its cache:
// load_factor × the candidates' mean load (consistent hashing with bounded loads' rule, on the
// load before this request). The least loaded candidate is always under it (load_factor ≥ 1),
// so on an idle or evenly loaded fleet every candidate is, and a prompt no engine holds goes
// by p2c, never to the first engine in fleet order. The request's own weight is not in it: a
// prompt longer than the mean load would otherwise fit nowhere (a light fleet's usual case).
func loadBound(factor float64, total, n int) int {
	return int(math.Floor(factor * float64(total) / float64(n)))
}

// eitherOf is power of two choices among cands (two or more): two distinct at random, the less
// loaded, the first on a tie.
func (f *Snapshot) eitherOf(cands []*Engine, a *Ask, now time.Time) *Engine {
	i := f.rnd(len(cands))
	j := f.rnd(len(cands) - 1)
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
func (f *Snapshot) drawTwo(list []*Engine, a *Ask, mk *marks, now time.Time, t tier, max int) *Engine {
	if len(list) < 2 {
		return nil
	}
	var first *Engine
	firstLoad := 0
	for range maxDraws {
		v := list[f.rnd(len(list))]
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
	tiers [ineligible][]*Engine
	under []*Engine
	match prefixMatches
}

var scratchPool = sync.Pool{New: func() any { return new(scratch) }}

// sift walks list and returns the candidates (the first tier that has any), or why there are
// none.
func (sc *scratch) sift(list []*Engine, mk *marks, now time.Time) ([]*Engine, Scarcity) {
	worst := UnknownModel
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
func (f *Snapshot) tally(list []*Engine, a *Ask, mk *marks, now time.Time) (t tier, n, total int, least *Engine, leastLoad int, why Scarcity) {
	var count, sum, minLoad [ineligible]int
	var minOf [ineligible]*Engine
	why = UnknownModel
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

func tierOf(v *Engine, mk *marks, now time.Time) tier {
	t, _ := classify(v, mk, now)
	return t
}

// LoadFor is v's load as a's placement weighs it: for a decode its load score (requests), for
// a prefill the prompt tokens it is computing for us, plus one request's worth (a's prompt) per
// request a fresh scrape shows beyond our reservations there (another router's, say). Our own
// requests are not counted twice: they are in the prompt tokens already, and counting each
// scraped request at a's size would make a producer holding a few long prompts look lighter
// than one holding many short ones, and draw every long prompt to it.
func (f *Snapshot) LoadFor(v *Engine, a Ask, now time.Time) int {
	return f.loadOf(v, &a, now)
}

// loadOf is loadFor without copying a, for the walks over every candidate.
func (f *Snapshot) loadOf(v *Engine, a *Ask, now time.Time) int {
	if a.Phase != fault.PhasePrefill {
		return v.LoadScore(now, a.Rules.ScrapeStale)
	}
	n := int(v.PrefillTokens.Load())
	if l, ok := v.Fresh(now, a.Rules.ScrapeStale); ok {
		if other := l.Running + l.Waiting - v.Load(); other > 0 {
			n += other * max(1, a.Tokens)
		}
	}
	return n
}

// longest returns the candidate of tier t with the longest match (at least one block) whose
// load is within limit, the less loaded on a tie, then one of the tied at random; or nil. It
// reads only the engines match names. When no candidate is under the limit, least alone is.
func (f *Snapshot) longest(match prefixMatches, a *Ask, mk *marks, now time.Time, t tier, limit int, noneUnder bool, least *Engine) (*Engine, int) {
	var best *Engine
	bestMatch, bestLoad, ties := 0, 0, 0
	for _, e := range match {
		n := int(e.depth)
		if n == 0 || n < bestMatch || int(e.slot) >= len(f.bySlot) || f.bySlot[e.slot] == 0 {
			continue
		}
		pos := f.bySlot[e.slot]
		v := f.Engines[pos-1]
		if !v.CanServe(a.Phase) || !v.Serves(a.Model) || tierOf(v, mk, now) != t {
			continue
		}
		l := f.loadOf(v, a, now)
		if noneUnder && v != least || !noneUnder && l > limit {
			continue
		}
		switch {
		case best == nil || n > bestMatch || l < bestLoad:
			best, bestMatch, bestLoad, ties = v, n, l, 1
		case l == bestLoad:
			// An equal match and load: each of the tied engines is as likely (reservoir
			// sampling), so a prefix every engine holds does not pile onto the first.
			if ties++; f.rnd(ties) == 0 {
				best = v
			}
		}
	}
	return best, bestMatch
}

// matchIn is v's match in a prompt's matches.
func matchIn(match prefixMatches, v *Engine) int {
	if v.Idx < 0 || v.Idx >= MaxIndexed {
		return 0
	}
	return match.of(v.Idx)
}

// matchOf is how many of blocks the prefix index says v served.
func (f *Snapshot) matchOf(v *Engine, blocks []uint64) int {
	if f.Index == nil || len(blocks) == 0 || v.Idx < 0 || v.Idx >= MaxIndexed {
		return 0
	}
	var mbuf [32]slotDepth
	return f.Index.match(blocks, mbuf[:0]).of(v.Idx)
}

// AnyAdmitted returns an admitted engine able to run phase, other than not, or nil; one that
// serves model is preferred.
func (f *Snapshot) AnyAdmitted(phase fault.Phase, not *Engine, model string) *Engine {
	var other *Engine
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

// Models is the union of the Models the fleet's engines serve, then of the LoRA adapters they
// list (lora.go), for GET /v1/Models.
func (f *Snapshot) Models() []string {
	seen := map[string]bool{}
	var out []string
	add := func(m string) {
		if !seen[m] {
			seen[m] = true
			out = append(out, m)
		}
	}
	for _, v := range f.Engines {
		if p := v.Models.Load(); p != nil {
			for _, m := range *p {
				add(m)
			}
		}
	}
	for _, v := range f.Engines {
		for _, m := range slices.Sorted(maps.Keys(v.Adapters.Load())) {
			add(m)
		}
	}
	return out
}
