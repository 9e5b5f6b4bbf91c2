package sim

import (
	"fmt"
	"io"
	"net/http"
	"slices"
	"strings"
	"sync"
	"time"

	json "github.com/goccy/go-json"
)

// LoRA adapters, as vLLM serves them:
//
//   - The API server holds the adapters it has loaded (vllm/entrypoints/openai/serving_models.py,
//     OpenAIServingModels): the --lora-modules at start, then those POST /v1/load_lora_adapter
//     adds and POST /v1/unload_lora_adapter removes. Each has a lora_int_id from one counter,
//     and GET /v1/models lists it after the base models with its path as root and its base
//     model as parent. A request naming an adapter that is not loaded is a 404, like any
//     unknown model.
//   - The scheduler (vllm/v1/core/sched/scheduler.py) admits a waiting request of an adapter
//     only while fewer than max_loras adapters are scheduled or its adapter is one of them;
//     otherwise it skips the request and looks at the next one (scheduler.go, admitLocked).
//     An adapter entering the batch that is not in one of the max_loras GPU slots is loaded
//     into the least recently used one (vllm/lora/worker_manager.py, LRUCacheWorkerLoRAManager):
//     that step lasts Options.LoRASwap longer.
//   - /metrics carries vllm:lora_requests_info (vllm/v1/metrics/loggers.py): a gauge whose
//     labels are max_lora and the comma-joined names of the adapters of the running and the
//     waiting requests, set to the current time at every record. prometheus_client keeps every
//     label set ever written, so the exposition holds several series and the newest (the
//     largest value) is the engine's state; the simulator keeps the last few.
//
// The run-time endpoints need VLLM_ALLOW_RUNTIME_LORA_UPDATING in vLLM; the simulator serves
// them whenever LoRA is on (Options.MaxLoRAs > 0 or --lora-modules given).

// loraAdapter is one loaded adapter (vLLM's LoRARequest as the API server keeps it).
type loraAdapter struct {
	name, path, parent string
	id                 int // lora_int_id
}

// loraRegistry is the API server's list of loaded adapters.
type loraRegistry struct {
	mu     sync.Mutex
	list   []loraAdapter
	nextID int
}

// newLoRARegistry loads the static modules (--lora-modules), ids 1, 2, … in order, each a
// child of the first base model (vLLM's default parent when base_model_name is not given).
func newLoRARegistry(modules []string, base string) *loraRegistry {
	r := &loraRegistry{}
	for _, m := range modules {
		r.nextID++
		r.list = append(r.list, loraAdapter{name: m, path: "/adapters/" + m, parent: base, id: r.nextID})
	}
	return r
}

// lookup returns the loaded adapter named name.
func (r *loraRegistry) lookup(name string) (loraAdapter, bool) {
	r.mu.Lock()
	defer r.mu.Unlock()
	for _, a := range r.list {
		if a.name == name {
			return a, true
		}
	}
	return loraAdapter{}, false
}

func (r *loraRegistry) adapters() []loraAdapter {
	r.mu.Lock()
	defer r.mu.Unlock()
	return slices.Clone(r.list)
}

// load adds an adapter, with _check_load_lora_adapter_request's answers.
func (r *loraRegistry) load(name, path, parent string) *apiError {
	if name == "" || path == "" {
		return &apiError{code: http.StatusBadRequest, typ: "InvalidUserInput", message: "Both 'lora_name' and 'lora_path' must be provided."}
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	if slices.ContainsFunc(r.list, func(a loraAdapter) bool { return a.name == name }) {
		return &apiError{code: http.StatusBadRequest, typ: "InvalidUserInput",
			message: fmt.Sprintf("The lora adapter '%s' has already been loaded.", name)}
	}
	r.nextID++
	r.list = append(r.list, loraAdapter{name: name, path: path, parent: parent, id: r.nextID})
	return nil
}

// unload removes an adapter, with _check_unload_lora_adapter_request's answers.
func (r *loraRegistry) unload(name string) *apiError {
	if name == "" {
		return &apiError{code: http.StatusBadRequest, typ: "InvalidUserInput",
			message: "either 'lora_name' and 'lora_int_id' needs to be provided."}
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	n := len(r.list)
	r.list = slices.DeleteFunc(r.list, func(a loraAdapter) bool { return a.name == name })
	if len(r.list) == n {
		return &apiError{code: http.StatusNotFound, typ: "NotFoundError",
			message: fmt.Sprintf("The lora adapter '%s' cannot be found.", name)}
	}
	return nil
}

// loraOn says the engine runs with LoRA (vLLM's --enable-lora).
func (o *Options) loraOn() bool { return o.MaxLoRAs > 0 || len(o.LoRAModules) > 0 }

// serveLoadLoRA answers POST /v1/load_lora_adapter {"lora_name", "lora_path"}: 200 with
// vLLM's plain-text success line, or its error envelope.
func (e *Engine) serveLoadLoRA(w http.ResponseWriter, r *http.Request) {
	var req struct {
		Name string `json:"lora_name"`
		Path string `json:"lora_path"`
	}
	if !readLoRARequest(w, r, &req) {
		return
	}
	if err := e.loras.load(req.Name, req.Path, e.opts.Models[0]); err != nil {
		err.write(w)
		return
	}
	w.WriteHeader(http.StatusOK)
	_, _ = fmt.Fprintf(w, "Success: LoRA adapter '%s' added successfully.", req.Name)
}

// serveUnloadLoRA answers POST /v1/unload_lora_adapter {"lora_name"}.
func (e *Engine) serveUnloadLoRA(w http.ResponseWriter, r *http.Request) {
	var req struct {
		Name string `json:"lora_name"`
	}
	if !readLoRARequest(w, r, &req) {
		return
	}
	if err := e.loras.unload(req.Name); err != nil {
		err.write(w)
		return
	}
	w.WriteHeader(http.StatusOK)
	_, _ = fmt.Fprintf(w, "Success: LoRA adapter '%s' removed successfully.", req.Name)
}

func readLoRARequest(w http.ResponseWriter, r *http.Request, v any) bool {
	body, err := io.ReadAll(io.LimitReader(r.Body, 1<<20))
	if err == nil {
		err = json.Unmarshal(body, v)
	}
	if err != nil {
		invalidRequest("", "want a JSON object: "+err.Error()).write(w)
		return false
	}
	return true
}

// loraCards are the adapters' entries of GET /v1/models: root is the adapter's path, parent
// its base model, and no max_model_len (vLLM leaves it None on an adapter's card).
func (e *Engine) loraCards(now int64) []modelCard {
	var out []modelCard
	for _, a := range e.loras.adapters() {
		parent := a.parent
		out = append(out, modelCard{ID: a.name, Object: "model", Created: now, OwnedBy: "vllm", Root: a.path, Parent: &parent,
			Permission: []modelPermission{newPermission(now)}})
	}
	return out
}

// loraInfo is the history of vllm:lora_requests_info's label sets, newest last, each with the
// time it was last set.
type loraInfo struct {
	mu     sync.Mutex
	series []loraSeries
}

type loraSeries struct {
	running, waiting string
	at               float64
}

// loraInfoKept bounds the label sets kept (vLLM keeps all of them).
const loraInfoKept = 8

// record sets the gauge of the current label set to now.
func (l *loraInfo) record(running, waiting string, now time.Time) []loraSeries {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.series = slices.DeleteFunc(l.series, func(s loraSeries) bool { return s.running == running && s.waiting == waiting })
	l.series = append(l.series, loraSeries{running, waiting, float64(now.UnixNano()) / 1e9})
	if len(l.series) > loraInfoKept {
		l.series = l.series[len(l.series)-loraInfoKept:]
	}
	return slices.Clone(l.series)
}

// appendLoRAMetrics writes vllm:lora_requests_info when LoRA is on: the scheduler's running
// and waiting adapters (none without the capacity model, where adapters never wait).
func (e *Engine) appendLoRAMetrics(b []byte) []byte {
	if !e.opts.loraOn() {
		return b
	}
	var running, waiting []string
	if e.sched != nil {
		running, waiting = e.sched.loraNames()
	}
	series := e.loraInfo.record(strings.Join(running, ","), strings.Join(waiting, ","), time.Now())
	b = append(b, "# HELP vllm:lora_requests_info Running stats on lora requests.\n# TYPE vllm:lora_requests_info gauge\n"...)
	for _, s := range series {
		b = fmt.Appendf(b, "vllm:lora_requests_info{max_lora=%q,running_lora_adapters=%q,waiting_lora_adapters=%q} ", fmt.Sprint(e.opts.MaxLoRAs), s.running, s.waiting)
		b = appendFloat(b, s.at)
		b = append(b, '\n')
	}
	return b
}

// loraGate is the scheduler's share of LoRA: max_loras and the GPU slots' contents.
type loraGate struct {
	max  int
	swap time.Duration
	// slots are the adapters in the GPU slots, least recently used first.
	slots []string
	swaps int64 // adapters loaded into a slot, for /sim/stats
}

// admits says whether a waiting sequence of adapter may join running (vLLM's max_loras check).
func (g *loraGate) admits(adapter string, running []*seq) bool {
	if adapter == "" || g.max == 0 {
		return true
	}
	var scheduled []string
	for _, q := range running {
		if a := q.keys.lora; a != "" && !slices.Contains(scheduled, a) {
			scheduled = append(scheduled, a)
		}
	}
	return len(scheduled) < g.max || slices.Contains(scheduled, adapter)
}

// activate puts adapter in a GPU slot for a sequence joining the batch, and returns the time
// that costs the step: LoRASwap when it was not in a slot already.
func (g *loraGate) activate(adapter string) time.Duration {
	if adapter == "" || g.max == 0 {
		return 0
	}
	if i := slices.Index(g.slots, adapter); i >= 0 {
		g.slots = append(slices.Delete(g.slots, i, i+1), adapter)
		return 0
	}
	g.slots = append(g.slots, adapter)
	if len(g.slots) > g.max {
		g.slots = g.slots[1:]
	}
	g.swaps++
	return g.swap
}

// loraNames are the distinct adapters of the running and the waiting sequences, in order.
func (s *scheduler) loraNames() (running, waiting []string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	names := func(qs []*seq) []string {
		var out []string
		for _, q := range qs {
			if a := q.keys.lora; a != "" && !slices.Contains(out, a) {
				out = append(out, a)
			}
		}
		return out
	}
	return names(s.running), names(s.waiting)
}
