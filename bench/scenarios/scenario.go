// Package scenarios holds the benchmark's scenarios, one file each: overhead (what the router
// adds to a realistic request, and its CPU per request and per token), saturation (the highest
// rate it sustains), streams (memory per concurrent stream), faults (goodput and one
// outcome per request under injected engine faults), fleet (placement policies on a trace),
// churn (engines added and removed under load), goodput (capacity under SLOs), thousand (a
// router in front of a thousand engines), nodes (several routers in front of one fleet) and
// tenants (the admission queue's flow control against FIFO for tenants and priority bands on a
// full fleet), tokens (prefix placement on the engines' tokens and events against the
// estimate), ranks (the prefix hit rate of data-parallel ranks routed against ranks left to
// vLLM) and lora (adapter-aware placement against adapter-blind). Each starts its own rig —
// fleet, router, generator — measures, and returns a
// report section with its figures and targets.
package scenarios

import (
	"fmt"
	"strings"

	"github.com/narwhal-router/narwhal/bench/harness"
	"github.com/narwhal-router/narwhal/bench/report"
)

// Scenario is one named measurement.
type Scenario struct {
	Name string
	Run  func(env harness.Env) (*report.Section, error)
}

// All lists every scenario in the order `make bench` runs them.
var All = []Scenario{
	{Name: "overhead", Run: Overhead},
	{Name: "saturation", Run: Saturation},
	{Name: "streams", Run: Streams},
	{Name: "faults", Run: Faults},
	{Name: "fleet", Run: Fleet},
	{Name: "churn", Run: Churn},
	{Name: "goodput", Run: Goodput},
	{Name: "thousand", Run: Thousand},
	{Name: "nodes", Run: Nodes},
	{Name: "tenants", Run: Tenants},
	{Name: "tokens", Run: Tokens},
	{Name: "mooncake", Run: MooncakeConnector},
	{Name: "ranks", Run: Ranks},
	{Name: "lora", Run: LoRA},
}

// Select returns the scenarios named in a comma-separated list ("" or "all": every one).
func Select(list string) ([]Scenario, error) {
	list = strings.TrimSpace(list)
	if list == "" || list == "all" {
		return All, nil
	}
	var out []Scenario
	for _, name := range strings.Split(list, ",") {
		name = strings.TrimSpace(name)
		found := false
		for _, s := range All {
			if s.Name == name {
				out = append(out, s)
				found = true
			}
		}
		if !found {
			return nil, fmt.Errorf("unknown scenario %q (known: %s)", name, names())
		}
	}
	return out, nil
}

func names() string {
	var n []string
	for _, s := range All {
		n = append(n, s.Name)
	}
	return strings.Join(n, ", ")
}
