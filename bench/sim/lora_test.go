package sim

import (
	"fmt"
	"net/http"
	"regexp"
	"strings"
	"testing"
	"time"

	json "github.com/goccy/go-json"
)

func loraRequest(model, prompt string, stream bool) string {
	return fmt.Sprintf(`{"model":%q,"prompt":%s,"stream":%v}`, model, quote(prompt), stream)
}

// TestLoRAModelsAndRuntimeLoading: the adapters are listed after the base model with their
// parent, and load and unload at run time with vLLM's answers; an unloaded adapter is a 404.
func TestLoRAModelsAndRuntimeLoading(t *testing.T) {
	t.Parallel()
	e := startEngine(t, Options{Models: []string{"base"}, LoRAModules: []string{"sql"}})
	models := func() map[string]*string {
		code, _, body := get(t, e.URL()+"/v1/models")
		var list struct {
			Data []struct {
				ID     string  `json:"id"`
				Parent *string `json:"parent"`
				Root   string  `json:"root"`
			} `json:"data"`
		}
		if code != 200 || json.Unmarshal(body, &list) != nil {
			t.Fatalf("/v1/models: %d %s", code, body)
		}
		out := map[string]*string{}
		for _, m := range list.Data {
			out[m.ID] = m.Parent
		}
		return out
	}
	if m := models(); len(m) != 2 || m["base"] != nil || m["sql"] == nil || *m["sql"] != "base" {
		t.Fatalf("/v1/models: %v, want base (no parent) and sql (parent base)", m)
	}
	code, _, body := post(t, e.URL(), "/v1/load_lora_adapter", `{"lora_name":"chat","lora_path":"/a/chat"}`)
	if code != 200 || string(body) != "Success: LoRA adapter 'chat' added successfully." {
		t.Fatalf("load: %d %s", code, body)
	}
	if code, _, body = post(t, e.URL(), "/v1/load_lora_adapter", `{"lora_name":"chat","lora_path":"/a/chat"}`); code != 400 ||
		!strings.Contains(string(body), "has already been loaded") {
		t.Fatalf("load again: %d %s, want 400", code, body)
	}
	if code, _, body = post(t, e.URL(), "/v1/load_lora_adapter", `{"lora_name":"x"}`); code != 400 {
		t.Fatalf("load without a path: %d %s, want 400", code, body)
	}
	if m := models(); m["chat"] == nil || *m["chat"] != "base" {
		t.Fatalf("/v1/models after the load: %v", m)
	}
	if code, _, body = post(t, e.URL(), "/v1/completions", loraRequest("chat", "hello there", false)); code != 200 {
		t.Fatalf("a request of the loaded adapter: %d %s", code, body)
	}
	if code, _, body = post(t, e.URL(), "/v1/unload_lora_adapter", `{"lora_name":"chat"}`); code != 200 {
		t.Fatalf("unload: %d %s", code, body)
	}
	if code, _, body = post(t, e.URL(), "/v1/completions", loraRequest("chat", "hello there", false)); code != 404 ||
		!strings.Contains(string(body), "The model `chat` does not exist.") {
		t.Fatalf("a request of the unloaded adapter: %d %s, want 404", code, body)
	}
	if code, _, body = post(t, e.URL(), "/v1/unload_lora_adapter", `{"lora_name":"chat"}`); code != 404 {
		t.Fatalf("unload again: %d %s, want 404", code, body)
	}
	// Without LoRA the run-time endpoints do not exist.
	plain := startEngine(t, Options{})
	if code, _, _ = post(t, plain.URL(), "/v1/load_lora_adapter", `{"lora_name":"a","lora_path":"/a"}`); code != http.StatusNotFound {
		t.Errorf("load on an engine without LoRA: %d, want 404", code)
	}
}

var loraInfoLine = regexp.MustCompile(`(?m)^vllm:lora_requests_info\{max_lora="(\d+)",running_lora_adapters="([^"]*)",waiting_lora_adapters="([^"]*)"\} (\S+)$`)

// loraState is the newest series of vllm:lora_requests_info (the largest value: vLLM sets
// the gauge to the current time).
func loraState(t testing.TB, e *Engine) (maxLora, running, waiting string) {
	t.Helper()
	_, _, body := get(t, e.URL()+"/metrics")
	best := -1.0
	for _, m := range loraInfoLine.FindAllStringSubmatch(string(body), -1) {
		var v float64
		fmt.Sscan(m[4], &v)
		if v > best {
			best, maxLora, running, waiting = v, m[1], m[2], m[3]
		}
	}
	if best < 0 {
		t.Fatalf("no vllm:lora_requests_info in %s", body)
	}
	return
}

// TestLoRAMaxLorasWaitsBehindSwap: with max_loras 1, a request of a second adapter waits
// while the first adapter runs (the metric shows it waiting), then pays the swap; another
// request of the running adapter joins the batch at once.
func TestLoRAMaxLorasWaitsBehindSwap(t *testing.T) {
	t.Parallel()
	const swap = 150 * time.Millisecond
	e := startEngine(t, Options{Models: []string{"base"}, LoRAModules: []string{"a", "b"}, MaxNumSeqs: 8,
		ITL: 10 * time.Millisecond, Tokens: 30, LoRASwap: swap})
	if m, r, w := loraState(t, e); m != "1" || r != "" || w != "" {
		t.Fatalf("idle: max_lora %q running %q waiting %q", m, r, w)
	}
	first := make(chan []time.Duration, 1)
	started := make(chan struct{})
	go func() { first <- loraTokenTimes(t, e, "a", words("a1", 5), started) }()
	<-started // past the step that loaded a
	if _, r, _ := loraState(t, e); r != "a" {
		t.Fatalf("running adapters %q with a's first token out, want a", r)
	}

	sameStart := time.Now()
	same := make(chan []time.Duration, 1)
	go func() { same <- loraTokenTimes(t, e, "a", words("a2", 5), nil) }()
	otherStart := time.Now()
	other := make(chan []time.Duration, 1)
	go func() { other <- loraTokenTimes(t, e, "b", words("b1", 5), nil) }()
	eventually(t, 5*time.Second, "adapter b waiting behind a", func() bool {
		_, r, w := loraState(t, e)
		return r == "a" && w == "b"
	})
	a1, a2, b1 := <-first, <-same, <-other
	if len(a1) != 30 || len(a2) != 30 || len(b1) != 30 {
		t.Fatalf("tokens: %d %d %d, want 30 each", len(a1), len(a2), len(b1))
	}
	// b starts once both a's are done (a2 ends last), plus the swap.
	a2End := sameStart.Add(a2[len(a2)-1])
	bFirst := otherStart.Add(b1[0])
	if bFirst.Before(a2End.Add(swap)) {
		t.Errorf("b's first token came %v after a's last: it should wait for a to drain and for the swap (%v)", bFirst.Sub(a2End), swap)
	}
	if a2[0] > swap {
		t.Errorf("a second request of the running adapter waited %v for its first token: it should join the batch", a2[0])
	}
	eventually(t, 5*time.Second, "nothing running or waiting", func() bool { _, r, w := loraState(t, e); return r == "" && w == "" })
}

// loraTokenTimes streams a completion of model and returns when each token arrived; first, if
// not nil, is closed at the first.
func loraTokenTimes(t testing.TB, e *Engine, model, prompt string, first chan struct{}) []time.Duration {
	start := time.Now()
	resp, err := testClient.Post(e.URL()+"/v1/completions", "application/json", strings.NewReader(loraRequest(model, prompt, true)))
	if err != nil {
		t.Error(err)
		if first != nil {
			close(first)
		}
		return nil
	}
	defer resp.Body.Close()
	var at []time.Duration
	defer func() {
		if first != nil && len(at) == 0 {
			close(first) // nothing came: the caller's wait ends and its checks fail
		}
	}()
	buf := make([]byte, 1<<16)
	var pending string
	for {
		n, err := resp.Body.Read(buf)
		pending += string(buf[:n])
		for {
			i := strings.Index(pending, "\n\n")
			if i < 0 {
				break
			}
			if strings.HasPrefix(pending[:i], "data: {") {
				at = append(at, time.Since(start))
				if len(at) == 1 && first != nil {
					close(first)
				}
			}
			pending = pending[i+2:]
		}
		if err != nil {
			break
		}
	}
	return at
}
