package tests

import (
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/narwhal-router/narwhal/bench/sim"
	"github.com/narwhal-router/narwhal/config"
)

// TestLoRAAdapters: adapters an engine loads (at start or at run time) are discovered with
// their base model and listed through the router; a request of an adapter that another adapter
// holds at max_lora on one consumer goes to the other; an unknown adapter is a 404 naming it.
func TestLoRAAdapters(t *testing.T) {
	h := start(t, setup{prefill: 1, decode: 2,
		engine: sim.Options{LoRAModules: []string{"a", "b"}, MaxLoRAs: 1, MaxNumSeqs: 8, ITL: 20 * time.Millisecond},
		config: func(c *config.Config) {
			c.Placement.ScrapeIntervalS = 0.05
			c.Placement.Policy = config.PlaceP2C
		}})
	models := func() map[string]string {
		resp, err := h.client.Get(h.base + "/v1/models")
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		var list struct {
			Data []struct {
				ID     string `json:"id"`
				Parent string `json:"parent"`
			} `json:"data"`
		}
		if err := json.NewDecoder(resp.Body).Decode(&list); err != nil {
			t.Fatal(err)
		}
		out := map[string]string{}
		for _, m := range list.Data {
			out[m.ID] = m.Parent
		}
		return out
	}
	eventually(t, 5*time.Second, func() bool {
		m := models()
		return m["a"] == "sim-model" && m["b"] == "sim-model"
	}, func() string { return fmt.Sprintf("the router lists %v, want adapters a and b of sim-model", models()) })

	// Adapter a runs on one consumer, which is then at max_lora (1).
	long := make(chan int, 1)
	go func() {
		resp, err := h.client.Post(h.base+"/v1/completions", "application/json",
			strings.NewReader(`{"model":"a","prompt":"hold the adapter","max_tokens":150,"stream":true}`))
		if err != nil {
			long <- 0
			return
		}
		_, _ = io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
		long <- resp.StatusCode
	}()
	var holder, other *sim.Engine
	eventually(t, 5*time.Second, func() bool {
		for i, d := range h.fleet.Engines[1:] {
			if running(t, d) == "a" {
				holder, other = d, h.fleet.Engines[2-i]
				return true
			}
		}
		return false
	}, func() string { return "adapter a never ran on a consumer" })
	// The router has read the holder's state once two scrapes began after a ran there.
	seen := len(scrapes(holder))
	eventually(t, 5*time.Second, func() bool { return len(scrapes(holder)) >= seen+2 },
		func() string { return "the router did not scrape the holder" })

	for i := range 4 {
		resp, body := h.post("/v1/completions", fmt.Sprintf(`{"model":"b","prompt":"adapter b %d","max_tokens":2}`, i))
		if resp.StatusCode != 200 {
			t.Fatalf("adapter b: %d %s", resp.StatusCode, body)
		}
	}
	for _, r := range holder.Requests() {
		if r.Leg == "decode" && strings.Contains(string(r.Body), `"model":"b"`) {
			t.Fatalf("a request of b was placed on %s, at max_lora with a running, while %s had a free slot", holder.Name(), other.Name())
		}
	}

	// An adapter loaded at run time (on the producer and one consumer) is found and served
	// there; unloaded, it is gone.
	for _, e := range []*sim.Engine{h.fleet.Engines[0], other} {
		if code := simPost(t, e.URL()+"/v1/load_lora_adapter", `{"lora_name":"c","lora_path":"/adapters/c"}`); code != 200 {
			t.Fatalf("load c on %s: %d", e.Name(), code)
		}
		seen := len(scrapes(e)) // both legs' engines must have been read since
		eventually(t, 5*time.Second, func() bool { return len(scrapes(e)) >= seen+2 },
			func() string { return "the router did not scrape " + e.Name() })
	}
	if m := models(); m["c"] != "sim-model" {
		t.Fatalf("the router lists %v, want c", m)
	}
	if resp, body := h.post("/v1/completions", `{"model":"c","prompt":"adapter c","max_tokens":2}`); resp.StatusCode != 200 {
		t.Fatalf("adapter c: %d %s", resp.StatusCode, body)
	}
	for _, r := range holder.Requests() {
		if r.Leg == "decode" && strings.Contains(string(r.Body), `"model":"c"`) {
			t.Fatalf("a request of c was placed on %s, which has not loaded it", holder.Name())
		}
	}
	for _, e := range []*sim.Engine{h.fleet.Engines[0], other} {
		if code := simPost(t, e.URL()+"/v1/unload_lora_adapter", `{"lora_name":"c"}`); code != 200 {
			t.Fatalf("unload c on %s: %d", e.Name(), code)
		}
	}
	eventually(t, 5*time.Second, func() bool { _, ok := models()["c"]; return !ok },
		func() string { return fmt.Sprintf("the router lists %v after c's unload", models()) })

	resp, body := h.post("/v1/completions", `{"model":"no-such-adapter","prompt":"x","max_tokens":2}`)
	if resp.StatusCode != http.StatusNotFound || !strings.Contains(string(body), "no-such-adapter") {
		t.Fatalf("an unknown adapter: %d %s, want a 404 naming it", resp.StatusCode, body)
	}
	if code := <-long; code != 200 {
		t.Fatalf("the long request of a: %d", code)
	}
}

// running is the adapters running on e, from the newest series of its vllm:lora_requests_info.
func running(t *testing.T, e *sim.Engine) string {
	resp, err := http.Get(e.URL() + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	raw, _ := io.ReadAll(resp.Body)
	best, out := -1.0, ""
	for _, line := range strings.Split(string(raw), "\n") {
		rest, ok := strings.CutPrefix(line, "vllm:lora_requests_info{")
		if !ok {
			continue
		}
		labels, value, _ := strings.Cut(rest, "} ")
		var v float64
		fmt.Sscan(value, &v)
		_, r, _ := strings.Cut(labels, `running_lora_adapters="`)
		r, _, _ = strings.Cut(r, `"`)
		if v > best {
			best, out = v, r
		}
	}
	return out
}

// scrapes are the router's GET /metrics of e so far.
func scrapes(e *sim.Engine) []sim.RecordedRequest {
	var out []sim.RecordedRequest
	for _, r := range e.Requests() {
		if r.Path == "/metrics" && r.Header["User-Agent"] != "Go-http-client/1.1" {
			out = append(out, r)
		}
	}
	return out
}

func simPost(t *testing.T, url, body string) int {
	resp, err := http.Post(url, "application/json", strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	return resp.StatusCode
}
