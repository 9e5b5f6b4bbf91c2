package loadgen

import (
	"testing"
	"time"

	"github.com/narwhal-router/narwhal/bench/sim"
	"github.com/narwhal-router/narwhal/config"
)

func TestFlowPickerSplitsByShare(t *testing.T) {
	p, err := newFlowPicker([]Flow{{Name: "quiet", Share: 1}, {Name: "noisy", Share: 9}})
	if err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct {
		u    float64
		want int
	}{{0, 0}, {0.0999, 0}, {0.1, 1}, {0.5, 1}, {0.99999, 1}} {
		if got := p.pick(c.u); got != c.want {
			t.Errorf("pick(%v) = %d, want %d", c.u, got, c.want)
		}
	}
	// Evenly spread uniform numbers land in proportion to the shares, whatever their scale.
	p, err = newFlowPicker([]Flow{{Name: "a", Share: 0.5}, {Name: "b", Share: 0.25}, {Name: "c", Share: 0.25}})
	if err != nil {
		t.Fatal(err)
	}
	counts := make([]int, 3)
	for i := range 1000 {
		counts[p.pick((float64(i)+0.5)/1000)]++
	}
	if counts[0] != 500 || counts[1] != 250 || counts[2] != 250 {
		t.Fatalf("counts %v, want [500 250 250]", counts)
	}
}

func TestFlowPickerRefusesBadFlows(t *testing.T) {
	for name, flows := range map[string][]Flow{
		"none":       nil,
		"zero share": {{Name: "a", Share: 1}, {Name: "b", Share: 0}},
		"negative":   {{Name: "a", Share: -1}},
		"no name":    {{Share: 1}},
		"same name":  {{Name: "a", Share: 1}, {Name: "a", Share: 2}},
	} {
		if _, err := newFlowPicker(flows); err == nil {
			t.Errorf("%s: accepted %v", name, flows)
		}
	}
}

// Each flow's key and band reach the router, and each flow's outcomes are kept apart: a band
// the tenant may not use is that flow's 400, an unknown key that flow's 401.
func TestFlowsSendTheirKeyAndBandAndAreCountedApart(t *testing.T) {
	g := rig(t, sim.Options{TTFT: 2 * time.Millisecond, ITL: time.Millisecond, Tokens: 8}, func(c *config.Config) {
		c.FlowControl.Bands = []config.FlowBand{{Name: "interactive"}, {Name: "batch"}}
		c.FlowControl.Tenants = []config.Tenant{{Name: "app", APIKeys: []string{"k-app"}, Band: "batch", Bands: []string{"interactive"}},
			{Name: "jobs", APIKeys: []string{"k-jobs"}, Band: "batch"}}
	})
	res := run(t, g, Phase{Name: "flows", Arm: Routed, Mode: Open, Rate: 200, Duration: 300 * time.Millisecond, MaxTokens: 5, PromptWords: 20,
		Flows: []Flow{
			{Name: "interactive", Key: "k-app", Band: "interactive", Share: 2},
			{Name: "not-allowed", Key: "k-jobs", Band: "interactive", Share: 1},
			{Name: "unknown-key", Key: "k-nobody", Share: 1},
		}})
	sent := 0
	for name, f := range res.Flows {
		sent += f.Sent
		if f.Elapsed != res.Elapsed {
			t.Errorf("%s: elapsed %v, phase %v", name, f.Elapsed, res.Elapsed)
		}
	}
	if sent != res.Sent || len(res.Flows) != 3 {
		t.Fatalf("flows %d with %d requests, phase sent %d", len(res.Flows), sent, res.Sent)
	}
	ok := res.Flows["interactive"]
	if ok.Sent == 0 || ok.OK != ok.Sent || len(ok.FirstByte) != ok.Sent {
		t.Fatalf("interactive: sent %d ok %d first bytes %d errors %v", ok.Sent, ok.OK, len(ok.FirstByte), ok.Errors)
	}
	for name, want := range map[string]string{"not-allowed": "http 400 band_not_allowed", "unknown-key": "http 401"} {
		f := res.Flows[name]
		if f.Sent == 0 || f.OK != 0 || f.ErrorCount() != f.Sent {
			t.Fatalf("%s: sent %d ok %d errors %v", name, f.Sent, f.OK, f.Errors)
		}
		for e := range f.Errors {
			if len(e) < len(want) || e[:len(want)] != want {
				t.Fatalf("%s: error %q, want %q", name, e, want)
			}
		}
	}
	if res.OK != ok.OK {
		t.Fatalf("phase ok %d, flows' %d", res.OK, ok.OK)
	}
}
