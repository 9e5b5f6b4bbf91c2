package transport

import (
	"testing"

	"github.com/narwhal-router/narwhal/transport/kv"
)

// TestParseEngineLoadShape reads the KV layout from vllm:cache_config_info as vLLM writes it
// (every CacheConfig field a label, one sample per data-parallel rank).
func TestParseEngineLoadShape(t *testing.T) {
	const info = `# HELP vllm:cache_config_info Information of the LLMEngine CacheConfig
# TYPE vllm:cache_config_info gauge
vllm:cache_config_info{block_size="32",cache_dtype="fp8_e4m3",enable_prefix_caching="True",engine="0",gpu_memory_utilization="0.9",num_gpu_blocks="4096"} 1.0
vllm:cache_config_info{block_size="32",cache_dtype="fp8_e4m3",enable_prefix_caching="True",engine="1",gpu_memory_utilization="0.9",num_gpu_blocks="4096"} 1.0
`
	for _, tc := range []struct {
		name, body string
		want       kv.Shape
	}{
		{"published", vllmMetrics + info, kv.Shape{BlockSize: 32, CacheDType: "fp8_e4m3"}},
		{"not published", vllmMetrics, kv.Shape{}},
		{"bad block size", vllmMetrics + `vllm:cache_config_info{block_size="x",cache_dtype="auto"} 1` + "\n",
			kv.Shape{CacheDType: "auto"}},
	} {
		l, err := ParseEngineLoad([]byte(tc.body))
		if err != nil {
			t.Fatalf("%s: %v", tc.name, err)
		}
		if l.Shape != tc.want {
			t.Errorf("%s: shape %+v, want %+v", tc.name, l.Shape, tc.want)
		}
	}
}
