package scenarios

import (
	"context"
	"encoding/json"
	"fmt"
	"math/rand/v2"
	"sync"
	"time"

	"github.com/narwhal-router/narwhal/bench/harness"
	"github.com/narwhal-router/narwhal/bench/report"
	"github.com/narwhal-router/narwhal/bench/sim"
	"github.com/narwhal-router/narwhal/config"
)

// loraArms are the lora scenario's arms: the same fleet, workload and policy, with and without
// placement.lora_affinity.
var loraArms = []fleetPolicy{
	{Name: "adapter-aware", Disaggregation: config.DisaggAuto, Placement: config.PlacePrefix, ScrapeS: 0.1},
	{Name: "adapter-blind", Disaggregation: config.DisaggAuto, Placement: config.PlacePrefix, ScrapeS: 0.1, LoRABlind: true},
}

// loraAdapters is the workload's adapters, the first ones asked for most (Zipf-like weights).
var loraAdapters = []string{"sql", "chat", "code", "legal", "med", "fin", "ops", "docs"}

// loraEngine is fleetEngine with LoRA on: two adapters per batch (vLLM's --max-loras 2) and a
// slot load of 40 ms (an adapter of a few tens of MB copied onto the GPU).
func loraEngine() sim.Options {
	e := fleetEngine()
	e.LoRAModules, e.MaxLoRAs, e.LoRASwap = loraAdapters, 2, 40*time.Millisecond
	return e
}

// LoRA offers a mixed adapter workload (every request names one of eight adapters, skewed) at
// a fixed open-loop rate to the fleet scenario's rig (2 producers, 4 consumers, the capacity
// model, max_loras 2), once with placement.lora_affinity and once adapter-blind, and reports
// TTFT p50/p99 of each.
func LoRA(env harness.Env) (*report.Section, error) {
	sec := report.NewSection("lora", "LoRA adapters: adapter-aware placement against adapter-blind (issue #36)")
	n, rate := 600, 60.0
	if env.Quick {
		n = 240
	}
	rnd := rand.New(rand.NewPCG(36, 36))
	weights := make([]float64, len(loraAdapters))
	total := 0.0
	for i := range weights {
		weights[i] = 1 / float64(i+1)
		total += weights[i]
	}
	type req struct {
		at   time.Duration
		body []byte
	}
	reqs := make([]req, n)
	at := time.Duration(0)
	for i := range reqs {
		x, k := rnd.Float64()*total, 0
		for x > weights[k] && k < len(weights)-1 {
			x -= weights[k]
			k++
		}
		reqs[i] = req{at: at, body: fmt.Appendf(nil, `{"model":%q,"prompt":%q,"max_tokens":48,"stream":true}`,
			loraAdapters[k], sim.Words(fmt.Sprintf("r%d", i), 120))}
		at += time.Duration(rnd.ExpFloat64() / rate * float64(time.Second))
	}
	sec.Printf("workload: %d streaming requests at %.0f/s over %d adapters (weights 1/k), 120-word prompts, 48 tokens; engines max_loras 2, adapter load 40 ms",
		n, rate, len(loraAdapters))
	t := report.NewTable("arm", "ok", "TTFT p50 ms", "TTFT p99 ms", "adapter loads (consumers)")
	for _, p := range loraArms {
		harness.Logf("lora: %s", p.Name)
		rig, err := startFleetRig(p, loraEngine(), fleetBlockWords)
		if err != nil {
			return nil, fmt.Errorf("%s: %w", p.Name, err)
		}
		// The router lists the adapters once its first scrape has read them.
		if err := rig.waitModels(len(loraAdapters) + 1); err != nil {
			rig.Close()
			return nil, fmt.Errorf("%s: %w", p.Name, err)
		}
		res := &armResult{}
		var wg sync.WaitGroup
		t0 := time.Now()
		for _, q := range reqs {
			time.Sleep(time.Until(t0.Add(q.at)))
			wg.Add(1)
			go func() {
				defer wg.Done()
				ttft, _, err := streamOnce(context.Background(), rig.client, rig.url, q.body)
				if err != nil {
					return
				}
				res.mu.Lock()
				res.ok++
				res.samples = append(res.samples, sample{ttft: ttft})
				res.mu.Unlock()
			}()
		}
		wg.Wait()
		swaps := int64(0)
		for _, e := range rig.fleet.Engines {
			if e.Role() == sim.RoleDecode {
				swaps += e.Stats().LoRASwaps
			}
		}
		rig.Close()
		ttft, _ := res.sorted()
		t.Row(p.Name, fmt.Sprintf("%d/%d", res.ok, n), msInt(pct(ttft, 0.5)), msInt(pct(ttft, 0.99)), fmt.Sprint(swaps))
		key := "lora_" + slug(p.Name) + "_"
		sec.Figure(key+"ttft_p50_ms", ms1(pct(ttft, 0.5)))
		sec.Figure(key+"ttft_p99_ms", ms1(pct(ttft, 0.99)))
		sec.Figure(key+"adapter_loads", swaps)
	}
	sec.Add(t.String())
	return sec, nil
}

// fleetBlockWords is the prefix index's block for workloads that are not the trace.
const fleetBlockWords = 16

// waitModels waits until the router lists at least n models.
func (r *fleetRig) waitModels(n int) error {
	deadline := time.Now().Add(10 * time.Second)
	for {
		resp, err := r.client.Get("http://" + r.srv.Addr() + "/v1/models")
		if err == nil {
			var list struct {
				Data []struct{} `json:"data"`
			}
			err = json.NewDecoder(resp.Body).Decode(&list)
			resp.Body.Close()
			if err == nil && len(list.Data) >= n {
				return nil
			}
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("the router did not list %d models within 10 s (last error: %v)", n, err)
		}
		time.Sleep(50 * time.Millisecond)
	}
}
