package placement

import (
	"testing"
	"time"

	"github.com/narwhal-router/narwhal/actors/health"
	"github.com/narwhal-router/narwhal/config"
	"github.com/narwhal-router/narwhal/transport"
	"github.com/narwhal-router/narwhal/transport/kv"
	"github.com/narwhal-router/narwhal/transport/wire"
)

// shaped is a view whose last scrape reported shape.
func shaped(name string, role config.Role, shape kv.Shape) *Engine {
	v := view(name, role, 0, 0)
	v.Scraped.Store(&LoadSample{At: time.Unix(1, 0), Load: transport.EngineLoad{Shape: kv.Shape{BlockSize: shape.BlockSize,
		CacheDType: shape.CacheDType}}})
	v.TP.Store(int32(shape.TP)) // a scrape never reports it: the engine's descriptors do
	return v
}

// TestPairable: a pair is kept apart when the engines' KV shapes differ or its breaker is open,
// and only then; an unknown shape is no evidence either way.
func TestPairable(t *testing.T) {
	auto16 := kv.Shape{BlockSize: 16, CacheDType: "auto"}
	for _, tc := range []struct {
		name string
		p, c kv.Shape
		open []health.PairView
		why  string
	}{
		{"same shapes", auto16, auto16, nil, ""},
		{"unknown shapes", kv.Shape{}, kv.Shape{}, nil, ""},
		{"one side unknown", auto16, kv.Shape{}, nil, ""},
		{"block sizes differ", kv.Shape{BlockSize: 32, CacheDType: "auto"}, auto16, nil, "incompatible KV caches: block size 32 ≠ 16"},
		{"cache dtypes differ", kv.Shape{BlockSize: 16, CacheDType: "fp8"}, auto16, nil, "incompatible KV caches: cache dtype fp8 ≠ auto"},
		{"the pair's breaker is open", auto16, auto16,
			[]health.PairView{{PairKey: health.PairKey{Producer: "p0", Consumer: "d0"}, Cause: "hash mismatch"}},
			"pair breaker open: hash mismatch"},
		{"TP sizes differ (the engines' descriptors)", kv.Shape{BlockSize: 16, TP: 2}, kv.Shape{BlockSize: 16, TP: 1}, nil,
			"incompatible KV caches: tensor parallel size 2 ≠ 1"},
		{"another pair's breaker is open", auto16, auto16,
			[]health.PairView{{PairKey: health.PairKey{Producer: "d0", Consumer: "p0"}, Cause: "x"}}, ""},
	} {
		p, c := shaped("p0", config.RolePrefill, tc.p), shaped("d0", config.RoleDecode, tc.c)
		f := NewFleet(NewPrefixIndex(1<<10, nil), nil)
		f.Publish([]*Engine{p, c})
		f.PublishPairs(tc.open)
		ok, why := f.Load().Pairable(p, c)
		if ok != (tc.why == "") || why != tc.why {
			t.Errorf("%s: Pairable = %v %q, want %q", tc.name, ok, why, tc.why)
		}
	}
}

// TestPlaceAttemptSkipsUnpairableProducers: an attempt's producer is never one that cannot hand
// to its consumer; with none left, the consumer computes the prompt (auto) or the attempt finds
// no producer (always).
func TestPlaceAttemptSkipsUnpairableProducers(t *testing.T) {
	now := time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)
	prompt := wire.Prompt{N: 1, Tokens: 500, Words: 500}
	for _, tc := range []struct {
		name     string
		policy   string
		p1Shape  kv.Shape
		open     []health.PairView
		producer string // "" with a local decode or no placement
		local    bool
	}{
		{"p0's block size differs: p1 prefills", config.DisaggAuto, kv.Shape{BlockSize: 16}, nil, "p1", false},
		{"p0's block size differs and p1's pair breaker is open: a local decode", config.DisaggAuto, kv.Shape{BlockSize: 16},
			[]health.PairView{{PairKey: health.PairKey{Producer: "p1", Consumer: "d0"}}}, "", true},
		{"policy always with no producer pairable: no placement", config.DisaggAlways, kv.Shape{BlockSize: 8}, nil, "", false},
	} {
		d0 := shaped("d0", config.RoleDecode, kv.Shape{BlockSize: 16})
		p0 := shaped("p0", config.RolePrefill, kv.Shape{BlockSize: 32})
		p1 := shaped("p1", config.RolePrefill, tc.p1Shape)
		f := NewFleet(NewPrefixIndex(1<<10, nil), nil)
		f.Publish([]*Engine{p0, p1, d0})
		f.PublishPairs(tc.open)
		rules := config.FleetRuntime{Disaggregation: tc.policy, MinPromptTokens: 100, Placement: config.PlaceP2C, BlockWords: 16,
			PrefillSaturation: 0.8, DecodeHeadroom: 0.5, MaxLocalPrompt: 1000}
		for range 20 { // p2c draws at random: the rule must hold every time
			pr := prompt
			plan := f.Load().PlaceAttempt(AttemptAsk{Model: "m", Prompt: &pr, Rules: &rules, Rates: &Rates{}, Now: now})
			got := ""
			if plan.Producer != nil {
				got = plan.Producer.Name
			}
			if got != tc.producer || plan.Decision.Local != tc.local {
				t.Fatalf("%s: producer %q local %v (%s), want %q local %v", tc.name, got, plan.Decision.Local,
					plan.Decision.Reason, tc.producer, tc.local)
			}
		}
	}
}

// TestOtherPartners: a pair may be kept apart only while both its engines have another partner
// in placement they can pair with.
func TestOtherPartners(t *testing.T) {
	for _, tc := range []struct {
		name    string
		p1Out   bool
		d1Shape kv.Shape
		open    []health.PairView
		want    bool
		p0Alone bool // no second consumer at all
	}{
		{name: "two of each", want: true},
		{name: "the other producer is out", p1Out: true, want: false},
		{name: "the other consumer cannot read p0", d1Shape: kv.Shape{CacheDType: "fp8"}, want: false},
		{name: "the other producer's pair with d0 is open",
			open: []health.PairView{{PairKey: health.PairKey{Producer: "p1", Consumer: "d0"}}}, want: false},
		{name: "one consumer only", p0Alone: true, want: false},
	} {
		p0, p1 := shaped("p0", config.RolePrefill, kv.Shape{CacheDType: "auto"}), shaped("p1", config.RolePrefill, kv.Shape{CacheDType: "auto"})
		d0, d1 := shaped("d0", config.RoleDecode, kv.Shape{CacheDType: "auto"}), shaped("d1", config.RoleDecode, tc.d1Shape)
		p1.Placeable.Store(!tc.p1Out)
		engines := []*Engine{p0, p1, d0, d1}
		if tc.p0Alone {
			engines = engines[:3]
		}
		f := NewFleet(NewPrefixIndex(1<<10, nil), nil)
		f.Publish(engines)
		f.PublishPairs(tc.open)
		if got := f.Load().OtherPartners(p0, d0); got != tc.want {
			t.Errorf("%s: OtherPartners(p0, d0) = %v, want %v", tc.name, got, tc.want)
		}
	}
}
