package placement

import (
	"slices"
	"testing"
	"time"

	"github.com/narwhal-router/narwhal/config"
	"github.com/narwhal-router/narwhal/transport"
	"github.com/narwhal-router/narwhal/transport/blockkey"
	"github.com/narwhal-router/narwhal/transport/fault"
	"github.com/narwhal-router/narwhal/transport/wire"
)

// loraEngine is a decode engine of base model m listing adapters, with load requests reserved
// and, when lora is not nil, a scrape at now saying which adapters run and wait there.
func loraEngine(name string, load int32, adapters []string, lora *transport.LoRALoad, now time.Time) *Engine {
	v := view(name, config.RoleDecode, 0, 0)
	v.Slots.Store(PackSlots(0, uint32(load)))
	list := make([]transport.Adapter, len(adapters))
	for i, a := range adapters {
		list[i] = transport.Adapter{Name: a, Parent: "m"}
	}
	v.StoreAdapters(list)
	if lora != nil {
		v.Scraped.Store(&LoadSample{At: now, Load: transport.EngineLoad{Running: int(load), LoRA: lora}})
	}
	return v
}

func TestPlaceLoRAAdapter(t *testing.T) {
	now := time.Unix(1_700_000_000, 0)
	both := []string{"a", "b"}
	running := func(max int, names ...string) *transport.LoRALoad {
		return &transport.LoRALoad{Running: names, MaxLoRA: max}
	}
	cases := []struct {
		name    string
		engines []*Engine
		model   string
		avoid   []string
		off     bool // placement.lora_affinity false
		want    map[string]bool
	}{
		{"the engine running the adapter", []*Engine{
			loraEngine("runs-a", 1, both, running(2, "a"), now), loraEngine("free", 1, both, running(2), now)},
			"a", nil, false, map[string]bool{"runs-a": true}},
		{"a waiting request of the adapter counts as running", []*Engine{
			loraEngine("waits-a", 1, both, &transport.LoRALoad{Running: []string{"b"}, Waiting: []string{"a"}, MaxLoRA: 1}, now),
			loraEngine("free", 1, both, running(2), now)},
			"a", nil, false, map[string]bool{"waits-a": true}},
		{"never the engine at max_lora without it while another has a free slot", []*Engine{
			loraEngine("full", 0, both, running(1, "a"), now), loraEngine("free", 3, both, running(2, "a"), now)},
			"b", nil, false, map[string]bool{"free": true}},
		{"an engine with no scrape stands with the free ones", []*Engine{
			loraEngine("full", 0, both, running(1, "a"), now), loraEngine("unknown", 3, both, nil, now)},
			"b", nil, false, map[string]bool{"unknown": true}},
		{"at max_lora everywhere: any of them", []*Engine{
			loraEngine("full1", 0, both, running(1, "a"), now), loraEngine("full2", 0, both, running(1, "a"), now)},
			"b", nil, false, map[string]bool{"full1": true, "full2": true}},
		{"the running engine over the load bound stands with the free ones", []*Engine{
			loraEngine("busy-a", 9, both, running(2, "a"), now), loraEngine("idle", 0, both, running(2), now)},
			"a", nil, false, map[string]bool{"idle": true}},
		{"an engine that unloaded the adapter only when nothing else lists it", []*Engine{
			loraEngine("unloaded", 0, []string{"b"}, running(2), now), loraEngine("full", 0, both, running(1, "b"), now)},
			"a", nil, false, map[string]bool{"full": true}},
		{"an avoided engine stays avoided though it runs the adapter", []*Engine{
			loraEngine("runs-a", 0, both, running(2, "a"), now), loraEngine("free", 0, both, running(2), now)},
			"a", []string{"runs-a"}, false, map[string]bool{"free": true}},
		{"a base model's request ignores adapters", []*Engine{
			loraEngine("full", 0, both, running(1, "a"), now), loraEngine("free", 0, both, running(2), now)},
			"m", nil, false, map[string]bool{"full": true, "free": true}},
		{"affinity off: adapter-blind", []*Engine{
			loraEngine("full", 0, both, running(1, "a"), now), loraEngine("free", 0, both, running(2), now)},
			"b", nil, true, map[string]bool{"full": true, "free": true}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			f := fleetOf(c.engines...)
			f.rules = &config.FleetRuntime{Placement: config.PlaceP2C, LoadFactor: 1.25, ScrapeStale: time.Second, LoRAAffinity: !c.off}
			seen := map[string]bool{}
			for range 64 {
				p := f.pickFor(Ask{Phase: fault.PhaseDecode, Model: c.model, Avoid: c.avoid, Now: now}, nil)
				if p.Engine == nil {
					t.Fatalf("no engine: %v", p.Why)
				}
				seen[p.Engine.Name] = true
			}
			for name := range seen {
				if !c.want[name] {
					t.Errorf("placed on %s; want only %v", name, c.want)
				}
			}
			if len(c.want) > 1 && len(seen) < len(c.want) {
				t.Errorf("placed on %v; want each of %v", seen, c.want)
			}
		})
	}
}

// TestLoRAScrapeStale: a scrape older than scrape_stale_s says nothing of an engine's adapters.
func TestLoRAScrapeStale(t *testing.T) {
	now := time.Unix(1_700_000_000, 0)
	old := now.Add(-time.Minute)
	f := fleetOf(loraEngine("stale-full", 0, []string{"a", "b"}, &transport.LoRALoad{Running: []string{"a"}, MaxLoRA: 1}, old),
		loraEngine("full", 0, []string{"a", "b"}, &transport.LoRALoad{Running: []string{"a"}, MaxLoRA: 1}, now))
	f.rules = &config.FleetRuntime{Placement: config.PlaceP2C, LoadFactor: 1.25, ScrapeStale: time.Second, LoRAAffinity: true}
	for range 32 {
		if p := f.pickFor(Ask{Phase: fault.PhaseDecode, Model: "b", Now: now}, nil); p.Engine.Name != "stale-full" {
			t.Fatalf("placed on %s: the engine whose state is stale is not known to be full", p.Engine.Name)
		}
	}
}

func TestParentAndModelsListAdapters(t *testing.T) {
	now := time.Now()
	f := fleetOf(loraEngine("e", 0, []string{"b", "a"}, nil, now))
	if p := f.Parent("a"); p != "m" {
		t.Errorf("Parent(a) = %q, want m", p)
	}
	if p := f.Parent("m"); p != "" {
		t.Errorf("Parent(m) = %q, want none", p)
	}
	if ms := f.Models(); len(ms) != 3 || ms[0] != "m" || ms[1] != "a" || ms[2] != "b" {
		t.Errorf("Models = %v, want m, a, b", ms)
	}
	if cs := f.Candidates(fault.PhaseDecode, "a"); len(cs) != 1 {
		t.Errorf("candidates of adapter a: %d, want 1", len(cs))
	}
	f.Engines[0].StoreAdapters([]transport.Adapter{{Name: "b", Parent: "m"}}) // a unloaded
	if cs := f.Candidates(fault.PhaseDecode, "a"); len(cs) != 0 {
		t.Errorf("candidates of adapter a after its unload: %d, want none", len(cs))
	}
}

func TestKeyAdapterSeparatesTheEstimate(t *testing.T) {
	words := func() wire.Prompt { return wire.Prompt{Blocks: []uint64{1, 2, 3}} }
	base, a1, a2, b := words(), words(), words(), words()
	KeyAdapter(&base, "", "m")
	KeyAdapter(&a1, "m", "a")
	KeyAdapter(&a2, "m", "a")
	KeyAdapter(&b, "m", "b")
	if !slices.Equal(base.Blocks, []uint64{1, 2, 3}) {
		t.Errorf("a base model's blocks changed: %v", base.Blocks)
	}
	if !slices.Equal(a1.Blocks, a2.Blocks) {
		t.Errorf("one adapter's equal prompts differ: %v %v", a1.Blocks, a2.Blocks)
	}
	for i := range a1.Blocks {
		if a1.Blocks[i] == base.Blocks[i] || a1.Blocks[i] == b.Blocks[i] || blockkey.IsKey(a1.Blocks[i]) {
			t.Errorf("block %d: adapter a %x, base %x, adapter b %x (and never in the token keys' domain)", i, a1.Blocks[i], base.Blocks[i], b.Blocks[i])
		}
	}
}
