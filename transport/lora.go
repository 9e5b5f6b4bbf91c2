package transport

import (
	"context"
	"strconv"
	"strings"

	dto "github.com/prometheus/client_model/go"
)

// LoRA adapters as a vLLM engine reports them: GET /v1/models lists each loaded adapter after
// the base models, with its base model as parent (vllm/entrypoints/openai/serving_models.py,
// show_available_models), and /metrics carries vllm:lora_requests_info
// (vllm/v1/metrics/loggers.py).

// Adapter is one LoRA adapter an engine has loaded, and its base model.
type Adapter struct {
	Name, Parent string
}

// Adapters lists the LoRA adapters the engine has loaded (the entries of GET /v1/models with a
// parent), in its order.
func (c *EngineClient) Adapters(ctx context.Context) ([]Adapter, error) {
	info, err := c.Models(ctx)
	if err != nil {
		return nil, err
	}
	out := []Adapter{}
	for _, m := range info {
		if m.Parent != nil && *m.Parent != "" && *m.Parent != m.ID {
			out = append(out, Adapter{Name: m.ID, Parent: *m.Parent})
		}
	}
	return out, nil
}

// LoRALoad is the newest vllm:lora_requests_info: the adapters of the requests running and
// waiting, and max_lora, how many adapters one batch may hold. vLLM's scheduler keeps a request
// of another adapter waiting while MaxLoRA adapters run.
type LoRALoad struct {
	Running, Waiting []string
	MaxLoRA          int
}

// Holds says whether adapter has requests running or waiting on the engine.
func (l *LoRALoad) Holds(adapter string) bool {
	for _, list := range [2][]string{l.Running, l.Waiting} {
		for _, a := range list {
			if a == adapter {
				return true
			}
		}
	}
	return false
}

// Full says whether the engine's batch holds MaxLoRA adapters: a request of any other waits
// until one of them drains.
func (l *LoRALoad) Full() bool { return l.MaxLoRA > 0 && len(l.Running) >= l.MaxLoRA }

// parseLoRALoad reads vllm:lora_requests_info from families. vLLM sets the gauge of the current
// label set to the current time, and prometheus_client keeps every label set it ever wrote: the
// newest series (the largest value) is the engine's state. It is nil when the engine reports
// none (LoRA is off).
func parseLoRALoad(families map[string]*dto.MetricFamily) *LoRALoad {
	f := families["vllm:lora_requests_info"]
	if f == nil {
		return nil
	}
	var newest *dto.Metric
	for _, m := range f.GetMetric() {
		if newest == nil || value(m) > value(newest) {
			newest = m
		}
	}
	if newest == nil {
		return nil
	}
	l := &LoRALoad{}
	for _, p := range newest.GetLabel() {
		switch p.GetName() {
		case "running_lora_adapters":
			l.Running = splitAdapters(p.GetValue())
		case "waiting_lora_adapters":
			l.Waiting = splitAdapters(p.GetValue())
		case "max_lora":
			l.MaxLoRA, _ = strconv.Atoi(p.GetValue())
		}
	}
	return l
}

// splitAdapters splits a comma-joined adapter list ("" is none).
func splitAdapters(s string) []string {
	if s == "" {
		return nil
	}
	out := strings.Split(s, ",")
	for i := range out {
		out[i] = strings.TrimSpace(out[i])
	}
	return out
}
