package transport

import (
	"strconv"

	dto "github.com/prometheus/client_model/go"

	"github.com/narwhal-router/narwhal/transport/kv"
)

// cacheShape reads the KV layout out of vLLM's vllm:cache_config_info gauge: an info metric
// whose labels are the engine's CacheConfig (vllm/v1/metrics/loggers.py, log_metrics_info,
// from CacheConfig.metrics_info in vllm/config/cache.py), one sample per data-parallel rank.
// The ranks of one engine share a configuration; the first sample with a label is read. f nil
// (an engine that does not publish it) is the zero shape: nothing known.
func cacheShape(f *dto.MetricFamily) kv.Shape {
	var s kv.Shape
	for _, m := range f.GetMetric() {
		for _, l := range m.GetLabel() {
			switch l.GetName() {
			case "block_size":
				if n, err := strconv.Atoi(l.GetValue()); err == nil && n > 0 && s.BlockSize == 0 {
					s.BlockSize = n
				}
			case "cache_dtype":
				if v := l.GetValue(); v != "" && s.CacheDType == "" {
					s.CacheDType = v
				}
			}
		}
	}
	return s
}
