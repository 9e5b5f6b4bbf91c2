package transport

import (
	"bytes"
	"context"
	"fmt"
	"strconv"
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
}

// Load reads GET /metrics, bounded by ctx. An engine that answers but reports none of the
// gauges is an error: a scrape configured against it would silently mean nothing.
func (c *EngineClient) Load(ctx context.Context) (EngineLoad, error) {
	body, err := c.get(ctx, "/metrics")
	if err != nil {
		return EngineLoad{}, err
	}
	l, ok := ParseEngineLoad(body)
	if !ok {
		return l, fmt.Errorf("engine %s: GET /metrics: no vllm:num_requests_running, vllm:num_requests_waiting or vllm:kv_cache_usage_perc", c.name)
	}
	return l, nil
}

// ParseEngineLoad reads the vLLM gauges out of Prometheus text; ok is false when none is there.
func ParseEngineLoad(body []byte) (l EngineLoad, ok bool) {
	var usageSum float64
	usageN := 0
	for len(body) > 0 {
		line := body
		if i := bytes.IndexByte(body, '\n'); i >= 0 {
			line, body = body[:i], body[i+1:]
		} else {
			body = nil
		}
		if len(line) == 0 || line[0] == '#' {
			continue
		}
		name, value, found := sample(line)
		if !found {
			continue
		}
		switch string(name) {
		case "vllm:num_requests_running":
			l.Running += int(value)
			ok = true
		case "vllm:num_requests_waiting":
			l.Waiting += int(value)
			ok = true
		case "vllm:kv_cache_usage_perc", "vllm:gpu_cache_usage_perc": // the latter: vLLM before 0.10
			usageSum += value
			usageN++
			ok = true
		}
	}
	if usageN > 0 {
		l.KVUsage, l.HasKVUsage = usageSum/float64(usageN), true
	}
	return l, ok
}

// sample splits a Prometheus text sample line into its metric name and value.
func sample(line []byte) (name []byte, value float64, ok bool) {
	end := bytes.IndexAny(line, "{ ")
	if end <= 0 {
		return nil, 0, false
	}
	name, rest := line[:end], line[end:]
	if rest[0] == '{' {
		close := bytes.IndexByte(rest, '}')
		if close < 0 {
			return nil, 0, false
		}
		rest = rest[close+1:]
	}
	fields := bytes.Fields(rest)
	if len(fields) == 0 {
		return nil, 0, false
	}
	v, err := strconv.ParseFloat(string(fields[0]), 64)
	if err != nil {
		return nil, 0, false
	}
	return name, v, true
}
