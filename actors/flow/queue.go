package flow

import (
	"math"
	"time"
)

// Band is a priority band. Bands are given highest priority first.
type Band struct {
	Name string
	// Sheddable requests never wait: when no engine has room they are refused at once (Shed).
	Sheddable bool
	// TTFTTarget, when positive, is how soon after its arrival a request of the band should get
	// its slot: its effective deadline is the earlier of arrival + TTFTTarget and its own.
	TTFTTarget time.Duration
}

// Limits bound the queue.
type Limits struct {
	// MaxQueue bounds the requests waiting in all bands together; 0 means nothing waits.
	MaxQueue int
	// MaxPerTenant bounds one tenant's waiting requests across bands; 0 means only MaxQueue.
	MaxPerTenant int
}

// Request is what the queue knows of a waiting request. K is the caller's handle for it.
type Request[K comparable] struct {
	Key    K
	Tenant string
	// Weight is the tenant's share of the band relative to the others' (values ≤ 0 count as 1).
	Weight float64
	// Band indexes the queue's bands, 0 the highest; out of range counts as the lowest.
	Band int
	// Cost is the request's estimated tokens, prompt plus expected output (< 1 counts as 1).
	Cost    int64
	Arrival time.Time
	// Deadline is the request's own deadline; zero means none.
	Deadline time.Time
	// Returned marks a request that was woken (Pop) and lost the race for the slot: it goes
	// ahead of its tenant's other requests, and its tenant gets back what the wake-up charged.
	Returned bool
}

// Verdict is what Push decided.
type Verdict uint8

const (
	// Queued: the request waits.
	Queued Verdict = iota
	// Shed: the request's band is sheddable and no engine has room (503, Retry-After).
	Shed
	// QueueFull: MaxQueue requests wait and none of a lower band can make room (503).
	QueueFull
	// TenantFull: the tenant already has MaxPerTenant requests waiting (429).
	TenantFull
	// Unmeetable: at the rate the queue drains, the request would get its slot after its
	// deadline (503); refused before it takes a slot.
	Unmeetable
)

var verdictNames = [...]string{"queued", "shed", "queue_full", "tenant_full", "deadline_unmeetable"}

func (v Verdict) String() string { return verdictNames[v] }

// entry is a waiting request and the order it is served in.
type entry[K comparable] struct {
	req      Request[K]
	deadline time.Time // effective: the earlier of the request's and its band's target
	seq      int64     // arrival order; a returned request takes a negative one
	share    float64   // Cost / Weight, what serving it adds to its tenant's counter
}

// tenantQueue is one tenant's waiting requests in one band and its virtual token counter.
type tenantQueue[K comparable] struct {
	name    string
	entries []*entry[K]
	tokens  int64 // estimated tokens waiting
	// counter is the tenant's virtual tokens served in the band: the sum of the shares it was
	// served since it became busy, starting at the band's virtual time.
	counter float64
}

type band[K comparable] struct {
	Band
	tenants map[string]*tenantQueue[K]
	// now is the band's virtual time: the counter of the tenant served last, before its charge.
	// A tenant that becomes busy starts from it, so time spent idle banks no credit.
	now   float64
	count int
}

// Queue is the admission queue's policy. The zero value is not usable; see New.
type Queue[K comparable] struct {
	bands  []*band[K]
	limits Limits
	byKey  map[K]*entry[K]
	// perTenant counts each tenant's waiting requests across bands (MaxPerTenant).
	perTenant map[string]int
	seq       int64
	front     int64
	drain     drainRate
}

// New returns an empty queue over the given bands (highest priority first; at least one).
func New[K comparable](bands []Band, limits Limits) *Queue[K] {
	if len(bands) == 0 {
		bands = []Band{{Name: "default"}}
	}
	q := &Queue[K]{limits: limits, byKey: map[K]*entry[K]{}, perTenant: map[string]int{}}
	for _, b := range bands {
		q.bands = append(q.bands, &band[K]{Band: b, tenants: map[string]*tenantQueue[K]{}})
	}
	return q
}

// Len is the number of waiting requests.
func (q *Queue[K]) Len() int { return len(q.byKey) }

// SetLimits changes the bounds (a reload); requests already waiting stay.
func (q *Queue[K]) SetLimits(l Limits) { q.limits = l }

// Push offers a request that found no engine with room. It returns whether the request waits
// and, when it does at the cost of others (a full queue), the requests it displaced: the caller
// refuses those as shed. A key already waiting is replaced.
func (q *Queue[K]) Push(now time.Time, r Request[K]) (Verdict, []Request[K]) {
	q.drain.tick(now, q.Len() > 0)
	q.Remove(r.Key)
	bi := q.bandOf(r.Band)
	r.Band = bi
	b := q.bands[bi]
	if b.Sheddable && !r.Returned {
		return Shed, nil
	}
	if q.limits.MaxPerTenant > 0 && q.perTenant[r.Tenant] >= q.limits.MaxPerTenant && !r.Returned {
		return TenantFull, nil
	}
	e := q.entryOf(r, b)
	if !r.Returned && !e.deadline.IsZero() && q.drain.known() {
		if wait := q.drain.timeFor(q.workAhead(e)); now.Add(wait).After(e.deadline) {
			return Unmeetable, nil
		}
	}
	var displaced []Request[K]
	if q.Len() >= q.limits.MaxQueue {
		victim := q.newestBelow(bi)
		if victim == nil {
			return QueueFull, nil
		}
		displaced = append(displaced, victim.req)
		q.Remove(victim.req.Key)
	}
	q.insert(b, e)
	return Queued, displaced
}

// Pop takes the request a freed slot goes to, among those eligible says the engine can serve:
// the highest band with an eligible request, in it the tenant with the smallest counter, of its
// requests the earliest deadline, then the earliest arrival. Requests whose deadline has
// passed leave first and are returned as expired, eligible or not; the caller refuses them.
func (q *Queue[K]) Pop(now time.Time, eligible func(K) bool) (Request[K], bool, []Request[K]) {
	q.drain.tick(now, q.Len() > 0)
	expired := q.expire(now)
	for _, b := range q.bands {
		if b.count == 0 {
			continue
		}
		t, e := b.pick(eligible)
		if e == nil {
			continue
		}
		b.now = max(b.now, t.counter)
		t.counter += e.share
		q.Remove(e.req.Key)
		q.drain.served(e.req.Cost)
		return e.req, true, expired
	}
	var none Request[K]
	return none, false, expired
}

// Remove takes a request out of the queue (it gave up or was answered); false if it was not
// waiting.
func (q *Queue[K]) Remove(key K) bool {
	e, ok := q.byKey[key]
	if !ok {
		return false
	}
	b := q.bands[e.req.Band]
	t := b.tenants[e.req.Tenant]
	for i, x := range t.entries {
		if x == e {
			t.entries = append(t.entries[:i], t.entries[i+1:]...)
			break
		}
	}
	t.tokens -= e.req.Cost
	b.count--
	delete(q.byKey, key)
	if q.perTenant[e.req.Tenant]--; q.perTenant[e.req.Tenant] == 0 {
		delete(q.perTenant, e.req.Tenant)
	}
	if len(t.entries) == 0 {
		// An idle tenant is forgotten: it starts again from the band's virtual time, so the
		// map holds only the tenants that wait.
		delete(b.tenants, e.req.Tenant)
	}
	return true
}

func (q *Queue[K]) bandOf(i int) int {
	if i < 0 || i >= len(q.bands) {
		return len(q.bands) - 1
	}
	return i
}

func (q *Queue[K]) entryOf(r Request[K], b *band[K]) *entry[K] {
	if r.Weight <= 0 {
		r.Weight = 1
	}
	if r.Cost < 1 {
		r.Cost = 1
	}
	e := &entry[K]{req: r, deadline: r.Deadline, share: float64(r.Cost) / r.Weight}
	if b.TTFTTarget > 0 {
		if target := r.Arrival.Add(b.TTFTTarget); e.deadline.IsZero() || target.Before(e.deadline) {
			e.deadline = target
		}
	}
	if r.Returned {
		q.front--
		e.seq = q.front
	} else {
		q.seq++
		e.seq = q.seq
	}
	return e
}

func (q *Queue[K]) insert(b *band[K], e *entry[K]) {
	t := b.tenants[e.req.Tenant]
	if t == nil {
		t = &tenantQueue[K]{name: e.req.Tenant, counter: b.now}
		b.tenants[e.req.Tenant] = t
	}
	if e.req.Returned {
		// The wake-up that lost the race charged the tenant; give it back, never below the
		// band's virtual time.
		t.counter = max(b.now, t.counter-e.share)
	}
	t.entries = append(t.entries, e)
	t.tokens += e.req.Cost
	b.count++
	q.byKey[e.req.Key] = e
	q.perTenant[e.req.Tenant]++
}

// pick is the band's next request among the eligible: the tenant with the smallest counter
// that has one, and its earliest-deadline eligible request.
func (b *band[K]) pick(eligible func(K) bool) (*tenantQueue[K], *entry[K]) {
	var bestT *tenantQueue[K]
	var bestE *entry[K]
	for _, t := range b.tenants {
		e := t.first(eligible)
		if e == nil {
			continue
		}
		if bestT == nil || t.counter < bestT.counter || (t.counter == bestT.counter && e.seq < bestE.seq) {
			bestT, bestE = t, e
		}
	}
	return bestT, bestE
}

// first is the tenant's eligible request with the earliest deadline (none counts as latest),
// then the earliest arrival.
func (t *tenantQueue[K]) first(eligible func(K) bool) *entry[K] {
	var best *entry[K]
	for _, e := range t.entries {
		if eligible != nil && !eligible(e.req.Key) {
			continue
		}
		if best == nil || earlier(e, best) {
			best = e
		}
	}
	return best
}

func earlier[K comparable](a, b *entry[K]) bool {
	switch {
	case a.deadline.IsZero() != b.deadline.IsZero():
		return !a.deadline.IsZero()
	case !a.deadline.Equal(b.deadline):
		return a.deadline.Before(b.deadline)
	}
	return a.seq < b.seq
}

// expire removes the requests whose deadline has passed.
func (q *Queue[K]) expire(now time.Time) []Request[K] {
	var out []Request[K]
	for k, e := range q.byKey {
		if !e.deadline.IsZero() && !now.Before(e.deadline) {
			out = append(out, e.req)
			q.Remove(k)
		}
	}
	return out
}

// newestBelow is the most recent request of the lowest band below band bi, the one a full
// queue sheds for an arrival of band bi; nil when no lower band waits.
func (q *Queue[K]) newestBelow(bi int) *entry[K] {
	for i := len(q.bands) - 1; i > bi; i-- {
		var newest *entry[K]
		for _, t := range q.bands[i].tenants {
			for _, e := range t.entries {
				if newest == nil || e.seq > newest.seq {
					newest = e
				}
			}
		}
		if newest != nil {
			return newest
		}
	}
	return nil
}

// workAhead estimates the tokens served before e: everything of the higher bands, and in its
// own band what start-time fair queuing serves of each tenant while e's tenant works through
// its queue and e — the other tenant's waiting tokens, at most in proportion to the weights.
func (q *Queue[K]) workAhead(e *entry[K]) int64 {
	var ahead int64
	for i := 0; i < e.req.Band; i++ {
		for _, t := range q.bands[i].tenants {
			ahead += t.tokens
		}
	}
	// Of its own tenant's, those it follows: an earlier deadline, or the same and an earlier
	// arrival.
	b := q.bands[e.req.Band]
	own := e.req.Cost
	if t := b.tenants[e.req.Tenant]; t != nil {
		for _, x := range t.entries {
			if earlier(x, e) {
				own += x.req.Cost
			}
		}
	}
	ahead += own - e.req.Cost
	ownShare := float64(own) / e.req.Weight
	for name, t := range b.tenants {
		if name == e.req.Tenant {
			continue
		}
		w := t.weight()
		ahead += min(t.tokens, int64(math.Ceil(ownShare*w)))
	}
	return ahead
}

// weight is the tenant's weight as its waiting requests give it.
func (t *tenantQueue[K]) weight() float64 {
	if len(t.entries) == 0 {
		return 1
	}
	return t.entries[0].req.Weight
}
