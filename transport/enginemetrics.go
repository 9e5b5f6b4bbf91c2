package transport

import (
	"bytes"
	"context"
	"errors"
	"fmt"

	dto "github.com/prometheus/client_model/go"
	"github.com/prometheus/common/expfmt"

	"github.com/narwhal-router/narwhal/transport/kv"
)

// EngineLoad is what a router reads of an engine's own load from its Prometheus /metrics,
// under vLLM's names: sequences running and waiting, and the KV cache's usage (0..1). Values
// of several label sets (several models, data-parallel ranks) are summed; usage is their mean.
type EngineLoad struct {
	Running int
	Waiting int
	KVUsage float64
	// HasKVUsage says the engine reported vllm:kv_cache_usage_perc.
	HasKVUsage bool
	// Shape is the KV layout vllm:cache_config_info's labels report (kvshape.go); zero
	// fields when the engine does not publish it.
	Shape kv.Shape
	// Ranks are the gauges per data-parallel rank (rankload.go), in rank order, when the engine
	// exports more than one; nil otherwise.
	Ranks []RankLoad
	// LoRA is the engine's vllm:lora_requests_info (lora.go); nil when it runs no LoRA.
	LoRA *LoRALoad
}

// Load reads GET /metrics, bounded by ctx. An engine that answers but reports none of the
// gauges is an error: a scrape configured against it would silently mean nothing.
func (c *EngineClient) Load(ctx context.Context) (EngineLoad, error) {
	body, err := c.get(ctx, "/metrics")
	if err != nil {
		return EngineLoad{}, err
	}
	l, err := ParseEngineLoad(body)
	if err != nil {
		return l, fmt.Errorf("engine %s: GET /metrics: %w", c.name, err)
	}
	return l, nil
}

// ParseEngineLoad reads the vLLM gauges out of Prometheus text exposition, with the Prometheus
// text parser (a label value may hold any character, '}' and escaped quotes included). It is an
// error when the text does not parse or has none of the gauges.
func ParseEngineLoad(body []byte) (EngineLoad, error) {
	var parser expfmt.TextParser
	families, err := parser.TextToMetricFamilies(bytes.NewReader(body))
	if err != nil {
		return EngineLoad{}, fmt.Errorf("not Prometheus text: %w", err)
	}
	var l EngineLoad
	found := false
	sum := func(name string) (total float64, n int) {
		f := families[name]
		if f == nil {
			return 0, 0
		}
		found = true
		for _, m := range f.GetMetric() {
			total += value(m)
			n++
		}
		return total, n
	}
	running, _ := sum("vllm:num_requests_running")
	waiting, _ := sum("vllm:num_requests_waiting")
	usage, n := sum("vllm:kv_cache_usage_perc")
	old, oldN := sum("vllm:gpu_cache_usage_perc") // vLLM before 0.10
	usage, n = usage+old, n+oldN
	if !found {
		return l, errors.New("no vllm:num_requests_running, vllm:num_requests_waiting or vllm:kv_cache_usage_perc")
	}
	l.Running, l.Waiting = int(running), int(waiting)
	l.Shape = cacheShape(families["vllm:cache_config_info"])
	l.Ranks = rankLoads(families)
	l.LoRA = parseLoRALoad(families)
	if n > 0 {
		l.KVUsage, l.HasKVUsage = usage/float64(n), true
	}
	return l, nil
}

// value is a sample's value whatever its declared type (vLLM's are gauges; an untyped sample
// from a bare exposition reads the same).
func value(m *dto.Metric) float64 {
	switch {
	case m.Gauge != nil:
		return m.Gauge.GetValue()
	case m.Counter != nil:
		return m.Counter.GetValue()
	case m.Untyped != nil:
		return m.Untyped.GetValue()
	}
	return 0
}
