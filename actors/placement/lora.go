package placement

import (
	"hash/fnv"
	"maps"
	"sync/atomic"
	"time"

	"github.com/narwhal-router/narwhal/transport"
	"github.com/narwhal-router/narwhal/transport/wire"
)

// LoRA adapters. An engine lists the adapters it has loaded in GET /v1/models, each with its
// base model as parent, and reports in vllm:lora_requests_info the adapters its running and
// waiting requests use and max_lora, how many adapters one batch may hold (transport/lora.go).
// vLLM's scheduler (vllm/v1/core/sched/scheduler.py) keeps a request of an adapter waiting
// while max_lora other adapters run, and loading an adapter into a GPU slot costs the step that
// does it. So an adapter's request goes (placement.lora_affinity, on by default):
//
//  1. to an engine where the adapter runs or waits already (no swap, no wait), unless that
//     engine is over the load bound (as prefix preference is bounded: load_factor × the
//     candidates' mean load), when it stands with the next;
//  2. else to one with a free adapter slot (fewer than max_lora adapters running), or whose
//     adapter state is not known (no fresh scrape);
//  3. only then to one at max_lora without the adapter (the request would wait there until an
//     adapter drains, then pay the swap);
//  4. last, to one whose own model list no longer has the adapter (unloaded since it joined).
//
// The standing is read within the best tier of the candidates (tier: an avoided engine stays
// avoided), and the leg's policy (prefix, p2c, round robin) chooses among the engines of the
// best standing. A base model's request never reads any of this.

// adapterList is the LoRA adapters an engine has loaded, by name, each with its base model.
type adapterList struct {
	p atomic.Pointer[map[string]string]
}

// Load is the engine's adapters by name (their base models); nil until first read.
func (a *adapterList) Load() map[string]string {
	if p := a.p.Load(); p != nil {
		return *p
	}
	return nil
}

// StoreAdapters records the adapters a GET /v1/models listed (the scraper, each scrape of an
// engine that runs LoRA). The candidate lists are remade only when the set changed.
func (v *Engine) StoreAdapters(list []transport.Adapter) {
	m := make(map[string]string, len(list))
	for _, a := range list {
		m[a.Name] = a.Parent
	}
	if old := v.Adapters.p.Load(); old != nil && maps.Equal(*old, m) {
		return
	}
	v.Adapters.p.Store(&m)
	modelsChanged.Add(1)
}

// hasAdapter says whether the engine's last model list named adapter.
func (v *Engine) hasAdapter(adapter string) bool {
	_, ok := v.Adapters.Load()[adapter]
	return ok
}

// Parent is model's base model when an engine of the fleet lists model as a LoRA adapter, ""
// otherwise.
func (f *Snapshot) Parent(model string) string {
	for _, v := range f.Engines {
		if p, ok := v.Adapters.Load()[model]; ok {
			return p
		}
	}
	return ""
}

// loraStanding is how an engine stands for an adapter's request, best first.
type loraStanding uint8

const (
	loraRunning   loraStanding = iota // the adapter runs or waits there
	loraFree                          // a free adapter slot, or nothing known of its adapters
	loraFull                          // max_lora adapters run there, this one not among them
	loraUnloaded                      // its model list no longer names the adapter
	loraStandings                     // how many there are
)

// standing is v's standing for a request of adapter, read at now.
func (v *Engine) standing(adapter string, now time.Time, stale time.Duration) loraStanding {
	if m := v.Adapters.Load(); m != nil {
		if _, ok := m[adapter]; !ok {
			return loraUnloaded
		}
	}
	l, ok := v.Fresh(now, stale)
	switch {
	case !ok || l.LoRA == nil:
		return loraFree
	case l.LoRA.Holds(adapter):
		return loraRunning
	case l.LoRA.Full():
		return loraFull
	}
	return loraFree
}

// KeyAdapter makes the estimate's word blocks of a LoRA adapter's prompt (parent not "") its
// own: each block's hash is mixed with the adapter's name, as vLLM mixes the adapter's name into
// every block hash, so the estimated index never says an engine holds an adapter's prompt
// because it computed the same words for the base model or another adapter. The top bit stays
// clear (blockkey's keys have it set), and the chain holds: equal prompts of one adapter still
// share their leading blocks.
func KeyAdapter(p *wire.Prompt, parent, adapter string) {
	if parent == "" || len(p.Blocks) == 0 {
		return
	}
	h := fnv.New64a()
	_, _ = h.Write([]byte(adapter))
	salt := h.Sum64()
	blocks := make([]uint64, len(p.Blocks))
	for i, b := range p.Blocks {
		x := (b ^ salt) * 0x9e3779b97f4a7c15
		blocks[i] = (x ^ x>>31) &^ (1 << 63)
	}
	p.Blocks = blocks
}

// adapterNames are the fleet's adapters (every engine's), as they were when modelsChanged
// stood at gen.
type adapterNames struct {
	gen   uint64
	names map[string]bool
}

// isAdapter says whether an engine of the snapshot lists model as a LoRA adapter: one map
// read, the set made by one walk of the fleet whenever an engine's models change.
func (f *Snapshot) isAdapter(model string) bool {
	gen := modelsChanged.Load()
	c := f.adapters.Load()
	if c == nil || c.gen != gen {
		c = &adapterNames{gen: gen, names: map[string]bool{}}
		for _, v := range f.Engines {
			for name := range v.Adapters.Load() {
				c.names[name] = true
			}
		}
		f.adapters.Store(c)
	}
	return c.names[model]
}

// byAdapter narrows list (the candidates of an adapter's leg) to the engines of the best tier
// with the best standing for the adapter (the rules above). It returns list itself when every
// engine of that tier stands alike, or when none is eligible (Place then says why).
func (f *Snapshot) byAdapter(list []*Engine, a *Ask, mk *marks, now time.Time) []*Engine {
	best := ineligible
	for _, v := range list {
		best = min(best, tierOf(v, mk, now))
	}
	if best == ineligible {
		return list
	}
	var count [loraStandings]int
	total, n := 0, 0
	for _, v := range list {
		if tierOf(v, mk, now) == best {
			total += f.loadOf(v, a, now)
			n++
		}
	}
	limit := loadBound(a.Rules.LoadFactor, total, n)
	standingOf := func(v *Engine) loraStanding {
		s := v.standing(a.Model, now, a.Rules.ScrapeStale)
		if s == loraRunning && f.loadOf(v, a, now) > limit {
			s = loraFree // the adapter runs there, but the engine is over the load bound
		}
		return s
	}
	for _, v := range list {
		if tierOf(v, mk, now) == best {
			count[standingOf(v)]++
		}
	}
	top := loraRunning
	for count[top] == 0 {
		top++
	}
	if count[top] == n && n == len(list) {
		return list
	}
	out := make([]*Engine, 0, count[top])
	for _, v := range list {
		if tierOf(v, mk, now) == best && standingOf(v) == top {
			out = append(out, v)
		}
	}
	return out
}
