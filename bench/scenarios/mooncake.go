package scenarios

import (
	"fmt"
	"os"

	"github.com/narwhal-router/narwhal/bench/harness"
	"github.com/narwhal-router/narwhal/bench/report"
	"github.com/narwhal-router/narwhal/bench/trace"
	"github.com/narwhal-router/narwhal/config"
	"github.com/narwhal-router/narwhal/transport/kv"
)

// connectorArms are the mooncake scenario's arms: the same fleet, policy and trace, every
// engine on NIXL (the decode starts once the producer answered with its descriptor) or on
// Mooncake (both legs start at once; the consumer pulls once the prefill registered its blocks).
var connectorArms = []fleetPolicy{
	{Name: "nixl", Disaggregation: config.DisaggAlways, Placement: config.PlaceP2C, Connector: kv.NIXL},
	{Name: "mooncake", Disaggregation: config.DisaggAlways, Placement: config.PlaceP2C, Connector: kv.Mooncake},
}

// MooncakeConnector replays the public trace, paced, against the fleet scenario's rig (the
// simulator's capacity model) under each connector, and reports the time to first token of
// each. Every request is disaggregated, so the arms differ only in how the handoff runs. The
// arms run twice, in the order A B B A, and each arm's two runs are pooled: a machine whose
// neighbours load it more as the scenario goes on then favours neither arm.
func MooncakeConnector(env harness.Env) (*report.Section, error) {
	sec := report.NewSection("mooncake", "TTFT of the Mooncake connector's concurrent legs against NIXL's sequential ones (issue #36)")
	rep, err := fleetReplay(env, sec)
	if rep == nil || err != nil {
		return sec, err
	}
	sec.Printf("workload: %s; always P/D, p2c, 2 producers and 4 consumers; each arm run twice (A B B A), pooled", rep.Summary())
	pooled := make([]armResult, len(connectorArms))
	for _, i := range []int{0, 1, 1, 0} {
		p := connectorArms[i]
		harness.Logf("mooncake: %s", p.Name)
		r, err := runFleetArm(p, rep, fleetMode{Name: "paced"})
		if err != nil {
			return nil, fmt.Errorf("%s: %w", p.Name, err)
		}
		pooled[i].samples = append(pooled[i].samples, r.samples...)
		pooled[i].ok += r.ok
		pooled[i].outTokens += r.outTokens
		pooled[i].window += r.window
	}
	t := report.NewTable("connector", "ok", "TTFT p50 ms", "TTFT p90 ms", "TTFT p99 ms", "e2e p50 ms")
	for i, p := range connectorArms {
		r := &pooled[i]
		ttft, e2e := r.sorted()
		t.Row(p.Name, fmt.Sprintf("%d/%d", r.ok, 2*len(rep.Requests)), msInt(pct(ttft, 0.5)), msInt(pct(ttft, 0.9)),
			msInt(pct(ttft, 0.99)), msInt(pct(e2e, 0.5)))
		sec.Figure(p.Name+"_ttft_p50_ms", ms1(pct(ttft, 0.5)))
		sec.Figure(p.Name+"_ttft_p99_ms", ms1(pct(ttft, 0.99)))
	}
	sec.Add(t.String())
	return sec, nil
}

// fleetReplay is the public trace scaled as the fleet scenario replays it (quick: 250
// requests), or nil when there is no trace (the section says it was skipped).
func fleetReplay(env harness.Env, sec *report.Section) (*trace.Replay, error) {
	if _, err := os.Stat(env.Trace); err != nil {
		sec.Printf("SKIPPED: no trace at %s (%v)", env.Trace, err)
		return nil, nil
	}
	recs, err := trace.Load(env.Trace)
	if err != nil {
		return nil, err
	}
	return trace.NewReplay(recs, fleetScale(env.Quick))
}
