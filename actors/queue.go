package actors

import (
	"slices"
	"time"

	"github.com/asynkron/protoactor-go/actor"

	"github.com/narwhal-router/narwhal/actors/flow"
	"github.com/narwhal-router/narwhal/actors/placement"
	"github.com/narwhal-router/narwhal/config"
	"github.com/narwhal-router/narwhal/messages"
)

// admissionQueue is the requests that found no engine with room, waiting for one: the pool
// actor's, and written by it alone. Who gets a freed slot is flow's decision (tenants, bands,
// deadlines); the pool tells the chosen supervisor to place again.
type admissionQueue struct {
	q *flow.Queue[string]
	// waiting are the queued requests by their supervisor's PID id.
	waiting map[string]waiter
	bands   []flow.Band
	// depth counts the waiting requests per flow label and band, for the flow_waiting gauge.
	depth map[[2]string]int
	// promised are the free slots given to woken requests that have not tried them yet, by the
	// request's PID id, and their count per engine: a slot is given to one waiter, not to every
	// waiter a notice of it reaches (a slot freed is told by the release and may be told again
	// by the engine's actor), so the order flow chose is the order requests get slots in.
	promised   map[string]promise
	promisedTo map[string]int
}

type promise struct {
	engine string
	at     time.Time
}

// promiseTTL bounds how long a promised slot stays withheld from others when its request never
// settles it (a supervisor that stopped without a word): the protocol settles every promise,
// this only keeps a lost message from costing an engine its slot until the next notice.
const promiseTTL = 2 * time.Second

type waiter struct {
	pid         *actor.PID
	model       string
	label, band string // the flow's metric label and band name
	since       time.Time
}

// bandsOf is flow_control.bands as the queue takes them.
func bandsOf(fc config.FlowControl) []flow.Band {
	var out []flow.Band
	for _, b := range fc.Bands {
		out = append(out, flow.Band{Name: b.Name, Sheddable: b.Sheddable, TTFTTarget: b.TTFTTargetS.Duration()})
	}
	return out
}

// ensureQueue makes the queue on first use, with the configuration's bands.
func (p *poolActor) ensureQueue() {
	if p.queue.q == nil {
		p.queue.bands = bandsOf(p.r.current().FlowControl)
		p.queue.q = flow.New[string](p.queue.bands, flow.Limits{})
		p.queue.waiting = map[string]waiter{}
		p.queue.depth = map[[2]string]int{}
		p.queue.promised = map[string]promise{}
		p.queue.promisedTo = map[string]int{}
	}
}

// reconfigureQueue applies a reload: new bands make a new queue, and every waiter places again
// (and waits again, in its band of the new configuration).
func (p *poolActor) reconfigureQueue(ctx actor.Context) {
	p.ensureQueue()
	if bands := bandsOf(p.r.current().FlowControl); !slices.Equal(bands, p.queue.bands) {
		p.wakeAll(ctx)
		p.queue.q = nil
		p.ensureQueue()
	}
}

// enqueue queues a request that found no engine with room, or refuses it by flow's rules; a
// request a full queue displaces to make room is refused as shed.
func (p *poolActor) enqueue(ctx actor.Context, m *messages.AwaitCapacity) {
	p.ensureQueue()
	fc := p.r.current().FlowControl
	p.queue.q.SetLimits(flow.Limits{MaxQueue: p.r.env.current().request.MaxQueue, MaxPerTenant: fc.MaxQueuedPerTenant})
	id := ctx.Sender().Id
	p.forget(id)
	now := time.Now()
	verdict, displaced := p.queue.q.Push(now, flow.Request[string]{Key: id, Tenant: m.Tenant, Weight: m.Weight, Band: m.Band,
		Cost: m.Cost, Arrival: m.Arrival, Deadline: m.Deadline, Returned: m.Front})
	if verdict != flow.Queued {
		p.r.metrics.FlowRefused(m.Label, m.BandName, verdict.String())
		ctx.Respond(&messages.QueueFull{Reason: verdict.String()})
		return
	}
	w := waiter{pid: ctx.Sender(), model: m.Model, label: m.Label, band: m.BandName, since: now}
	p.queue.waiting[id] = w
	p.counted(w, 1)
	for _, d := range displaced {
		p.refuse(ctx, d.Key, flow.Shed.String())
	}
	p.depthChanged()
	// A release that happened while this request was on its way here saw no waiter and told
	// no one: offer the room of the engines it found full that have some now.
	for _, name := range m.Full {
		if v := p.r.fleet.Load().Engine(name); v != nil && v.Placeable.Load() && p.room(v) > 0 {
			p.wake(ctx, v)
		}
	}
}

// room is how many of v's free slots are not promised to a woken request (the waiters' count
// when v has no bound).
func (p *poolActor) room(v *placement.Engine) int {
	if v.MaxInflight == 0 {
		return p.queue.q.Len()
	}
	return v.MaxInflight - v.Load() - p.queue.promisedTo[v.Name]
}

// dequeue takes a request that stopped waiting (it gave up, or was answered) out of the queue,
// with any slot it was promised.
func (p *poolActor) dequeue(ctx actor.Context, pid *actor.PID) {
	if p.queue.q == nil || pid == nil {
		return
	}
	if p.queue.q.Remove(pid.Id) {
		p.forget(pid.Id)
	}
	p.settle(ctx, pid)
	p.depthChanged()
}

// settle ends the promise of a slot to a woken request. A request that could not use the slot
// (another engine it needs is full) is back in the queue at the front of its tenant; the slot
// is not offered again at once, which would wake the same request in a loop, but at the next
// notice of room, as before the promise.
func (p *poolActor) settle(ctx actor.Context, pid *actor.PID) {
	if p.queue.q == nil || pid == nil {
		return
	}
	pr, ok := p.queue.promised[pid.Id]
	if !ok {
		return
	}
	p.unpromise(pid.Id, pr)
	if _, again := p.queue.waiting[pid.Id]; again {
		return // it could not use the slot: another engine it needs is full, and will tell
	}
	// It took a slot elsewhere, or ended: the promised one is free for the next waiter.
	if v := p.r.fleet.Load().Engine(pr.engine); v != nil && v.Placeable.Load() && p.room(v) > 0 {
		p.wake(ctx, v)
	}
}

// promiseCheck is the pool's own reminder, promiseTTL after a promise: one still unsettled
// then (its request stopped without a word) is dropped and its slot offered again.
type promiseCheck struct {
	id string
	at time.Time
}

func (p *poolActor) onPromiseCheck(ctx actor.Context, m *promiseCheck) {
	pr, ok := p.queue.promised[m.id]
	if !ok || !pr.at.Equal(m.at) {
		return
	}
	p.unpromise(m.id, pr)
	if v := p.r.fleet.Load().Engine(pr.engine); v != nil && v.Placeable.Load() {
		p.wake(ctx, v)
	}
}

func (p *poolActor) unpromise(id string, pr promise) {
	delete(p.queue.promised, id)
	if p.queue.promisedTo[pr.engine]--; p.queue.promisedTo[pr.engine] <= 0 {
		delete(p.queue.promisedTo, pr.engine)
	}
}

// forget drops what the pool keeps of a waiter the queue no longer holds.
func (p *poolActor) forget(id string) {
	if w, ok := p.queue.waiting[id]; ok {
		p.counted(w, -1)
		delete(p.queue.waiting, id)
	}
}

// refuse tells a waiter the queue gave it up (displaced, or its deadline can no longer be met).
func (p *poolActor) refuse(ctx actor.Context, id, reason string) {
	w, ok := p.queue.waiting[id]
	if !ok {
		return
	}
	p.forget(id)
	p.r.metrics.FlowRefused(w.label, w.band, reason)
	ctx.Send(w.pid, &messages.QueueFull{Reason: reason})
}

// counted moves the flow_waiting gauge of w's flow by delta.
func (p *poolActor) counted(w waiter, delta int) {
	k := [2]string{w.label, w.band}
	n := p.queue.depth[k] + delta
	if n <= 0 {
		delete(p.queue.depth, k)
		n = 0
	} else {
		p.queue.depth[k] = n
	}
	p.r.metrics.FlowWaiting(w.label, w.band, n)
}

// wake gives the engine's free slots to the waiters flow picks among those the engine can
// serve: as many as it has room for.
func (p *poolActor) wake(ctx actor.Context, v *placement.Engine) {
	if v == nil || p.queue.q == nil || p.queue.q.Len() == 0 {
		return
	}
	now := time.Now()
	room := p.room(v)
	serves := func(id string) bool { return v.Serves(p.queue.waiting[id].model) }
	for room > 0 {
		r, ok, expired := p.queue.q.Pop(now, serves)
		for _, e := range expired {
			p.refuse(ctx, e.Key, flow.Unmeetable.String())
		}
		if !ok {
			break
		}
		w := p.queue.waiting[r.Key]
		p.forget(r.Key)
		p.r.metrics.FlowAdmitted(w.label, w.band, now.Sub(w.since))
		if v.MaxInflight > 0 {
			p.queue.promised[r.Key] = promise{engine: v.Name, at: now}
			p.queue.promisedTo[v.Name]++
			root, self, check := p.r.root, p.self, &promiseCheck{id: r.Key, at: now}
			time.AfterFunc(promiseTTL, func() { root.Send(self, check) })
		}
		ctx.Send(w.pid, &messages.CapacityAvailable{Engine: v.Name})
		room--
	}
	p.depthChanged()
}

// wakeAll tells every waiter to place again.
func (p *poolActor) wakeAll(ctx actor.Context) {
	if p.queue.q == nil {
		return
	}
	for id, w := range p.queue.waiting {
		p.queue.q.Remove(id)
		p.forget(id)
		ctx.Send(w.pid, &messages.CapacityAvailable{})
	}
	p.depthChanged()
}

// depthChanged publishes the queue depth: a gauge, and the count supervisors read to decide
// whether a released slot is worth telling the pool about.
func (p *poolActor) depthChanged() {
	n := 0
	if p.queue.q != nil {
		n = p.queue.q.Len()
	}
	p.r.env.queued.Store(int32(n))
	p.r.metrics.QueueDepth(n)
}
