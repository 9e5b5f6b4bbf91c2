package transport

import (
	"reflect"
	"testing"
)

// vLLM's /metrics as its prometheus_client writes it, with label values a hand-written parser
// trips on: a '}' and an escaped quote inside a model name, a second data-parallel rank.
const vllmMetrics = `# HELP vllm:num_requests_running Number of requests in model execution batches.
# TYPE vllm:num_requests_running gauge
vllm:num_requests_running{engine="0",model_name="org/odd}name"} 3.0
vllm:num_requests_running{engine="1",model_name="org/odd}name"} 2.0
# HELP vllm:num_requests_waiting Number of requests waiting to be processed.
# TYPE vllm:num_requests_waiting gauge
vllm:num_requests_waiting{engine="0",model_name="say \"hi\" } 9"} 4.0
# HELP vllm:kv_cache_usage_perc KV-cache usage. 1 means 100 percent usage.
# TYPE vllm:kv_cache_usage_perc gauge
vllm:kv_cache_usage_perc{engine="0",model_name="org/odd}name"} 0.25
vllm:kv_cache_usage_perc{engine="1",model_name="org/odd}name"} 0.75
# HELP vllm:prompt_tokens_total Number of prefill tokens processed.
# TYPE vllm:prompt_tokens_total counter
vllm:prompt_tokens_total{engine="0",model_name="x"} 1234.0
`

func TestParseEngineLoad(t *testing.T) {
	l, err := ParseEngineLoad([]byte(vllmMetrics))
	if err != nil {
		t.Fatal(err)
	}
	// Each rank's gauges too, by the engine label (rankload.go).
	ranks := []RankLoad{{Rank: 0, Running: 3, Waiting: 4}, {Rank: 1, Running: 2}}
	if want := (EngineLoad{Running: 5, Waiting: 4, KVUsage: 0.5, HasKVUsage: true, Ranks: ranks}); !reflect.DeepEqual(l, want) {
		t.Fatalf("parsed %+v, want %+v", l, want)
	}
	if r, ok := l.Rank(1); l.RankCount() != 2 || !ok || r.Running != 2 {
		t.Fatalf("%d ranks, rank 1 %+v %v; want 2 ranks, rank 1 running 2", l.RankCount(), r, ok)
	}
	// vLLM before 0.10 named the usage gpu_cache_usage_perc; without usage, HasKVUsage is false.
	l, err = ParseEngineLoad([]byte("vllm:gpu_cache_usage_perc 0.5\nvllm:num_requests_waiting 1\n"))
	if err != nil || !l.HasKVUsage || l.KVUsage != 0.5 || l.Waiting != 1 {
		t.Fatalf("old names: %+v %v", l, err)
	}
	l, err = ParseEngineLoad([]byte("vllm:num_requests_running 2\n"))
	if err != nil || l.HasKVUsage || l.Running != 2 {
		t.Fatalf("no usage: %+v %v", l, err)
	}
	for name, body := range map[string]string{
		"none of the gauges": "process_cpu_seconds_total 1\n",
		"not Prometheus":     "<html>hello</html>\n",
		"an unclosed label":  `vllm:num_requests_running{model_name="x} 1` + "\n",
	} {
		if l, err := ParseEngineLoad([]byte(body)); err == nil {
			t.Errorf("%s: parsed %+v", name, l)
		}
	}
}

// TestParseLoRALoad: of vllm:lora_requests_info's series the newest (vLLM sets the gauge to the
// current time) is the engine's state; an engine without LoRA reports none.
func TestParseLoRALoad(t *testing.T) {
	body := `# HELP vllm:num_requests_running Number of requests in model execution batches.
# TYPE vllm:num_requests_running gauge
vllm:num_requests_running{engine="0",model_name="m"} 2
# HELP vllm:lora_requests_info Running stats on lora requests.
# TYPE vllm:lora_requests_info gauge
vllm:lora_requests_info{max_lora="2",running_lora_adapters="a",waiting_lora_adapters=""} 1.7000000001e+09
vllm:lora_requests_info{max_lora="2",running_lora_adapters="a,b",waiting_lora_adapters="c"} 1.7000000005e+09
vllm:lora_requests_info{max_lora="2",running_lora_adapters="",waiting_lora_adapters=""} 1.7000000003e+09
`
	l, err := ParseEngineLoad([]byte(body))
	if err != nil {
		t.Fatal(err)
	}
	if l.LoRA == nil || l.LoRA.MaxLoRA != 2 || len(l.LoRA.Running) != 2 || l.LoRA.Running[1] != "b" ||
		len(l.LoRA.Waiting) != 1 || l.LoRA.Waiting[0] != "c" {
		t.Fatalf("LoRA = %+v, want the newest series: running a,b, waiting c, max 2", l.LoRA)
	}
	if !l.LoRA.Full() || !l.LoRA.Holds("c") || l.LoRA.Holds("d") {
		t.Errorf("Full %v, Holds(c) %v, Holds(d) %v", l.LoRA.Full(), l.LoRA.Holds("c"), l.LoRA.Holds("d"))
	}
	plain, _ := ParseEngineLoad([]byte("# TYPE vllm:num_requests_running gauge\nvllm:num_requests_running 1\n"))
	if plain.LoRA != nil {
		t.Errorf("an engine without the metric: LoRA = %+v, want nil", plain.LoRA)
	}
}
