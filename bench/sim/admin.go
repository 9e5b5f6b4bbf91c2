package sim

import (
	"io"
	"net/http"
	"slices"
	"strings"
	"time"

	json "github.com/goccy/go-json"
	"github.com/google/uuid"
)

// apiRoutes serves vLLM's endpoints and the simulator's /sim/ admin endpoints.
func (e *Engine) apiRoutes() http.Handler {
	mux := http.NewServeMux()
	mux.HandleFunc("POST /v1/completions", e.serveGeneration(completionsAPI))
	mux.HandleFunc("POST /v1/chat/completions", e.serveGeneration(chatAPI))
	mux.HandleFunc("POST /v1/responses", e.serveGeneration(responsesAPI))
	mux.HandleFunc("POST "+renderPaths[0], e.serveRender(completionsAPI))
	mux.HandleFunc("POST "+renderPaths[1], e.serveRender(chatAPI))
	for _, p := range passthroughPaths {
		mux.HandleFunc("POST "+p, e.servePassthrough)
	}
	mux.HandleFunc("GET /health", e.serveHealth)
	mux.HandleFunc("GET /v1/models", e.serveModels)
	mux.HandleFunc("GET /version", e.serveVersion)
	mux.HandleFunc("GET /metrics", e.serveMetrics)
	if e.opts.loraOn() {
		mux.HandleFunc("POST /v1/load_lora_adapter", e.serveLoadLoRA)
		mux.HandleFunc("POST /v1/unload_lora_adapter", e.serveUnloadLoRA)
	}
	mux.HandleFunc("/", e.serveNotFound)

	mux.HandleFunc("GET /sim/stats", e.serveStats)
	mux.HandleFunc("GET /sim/requests", e.serveRecorded)
	mux.HandleFunc("DELETE /sim/requests", e.serveResetRecorded)
	mux.HandleFunc("GET /sim/faults", e.serveFaults)
	mux.HandleFunc("POST /sim/faults", e.serveInjectFault)
	mux.HandleFunc("DELETE /sim/faults", e.serveClearFaults)
	mux.HandleFunc("POST /sim/restart", e.serveRestart)
	mux.HandleFunc("POST /sim/kvconfig", e.serveSetKVConfig)
	mux.HandleFunc("POST /sim/health", e.serveSetHealth)
	mux.HandleFunc("POST /sim/metrics", e.serveSetMetricsFault)
	mux.HandleFunc("DELETE /sim/metrics", e.serveClearMetricsFault)
	return e.recordOthers(mux)
}

// recordOthers records every request that is neither a generation (those record
// themselves once their leg is known) nor a /sim/ admin call.
func (e *Engine) recordOthers(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		p := r.URL.Path
		if !strings.HasPrefix(p, "/sim/") && p != "/v1/completions" && p != "/v1/chat/completions" &&
			p != "/v1/responses" && !slices.Contains(passthroughPaths[:], p) && !slices.Contains(renderPaths[:], p) {
			e.recorded.add(newRecord(legNone, r, nil, time.Now()))
		}
		next.ServeHTTP(w, r)
	})
}

func writeJSON(w http.ResponseWriter, code int, v any) {
	b, err := json.Marshal(v)
	if err != nil {
		newError(http.StatusInternalServerError, "", "encode response: "+err.Error()).write(w)
		return
	}
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(code)
	_, _ = w.Write(b)
}

// serveNotFound answers like FastAPI does for an unknown route.
func (e *Engine) serveNotFound(w http.ResponseWriter, r *http.Request) {
	writeJSON(w, http.StatusNotFound, map[string]string{"detail": "Not Found"})
}

func (e *Engine) serveHealth(w http.ResponseWriter, r *http.Request) {
	if e.dead.Load() {
		w.WriteHeader(http.StatusServiceUnavailable)
		return
	}
	w.WriteHeader(http.StatusOK)
}

type modelList struct {
	Object string      `json:"object"`
	Data   []modelCard `json:"data"`
}

type modelCard struct {
	ID          string            `json:"id"`
	Object      string            `json:"object"`
	Created     int64             `json:"created"`
	OwnedBy     string            `json:"owned_by"`
	Root        string            `json:"root"`
	Parent      *string           `json:"parent"`
	MaxModelLen *int              `json:"max_model_len"`
	Permission  []modelPermission `json:"permission"`
}

type modelPermission struct {
	ID                 string  `json:"id"`
	Object             string  `json:"object"`
	Created            int64   `json:"created"`
	AllowCreateEngine  bool    `json:"allow_create_engine"`
	AllowSampling      bool    `json:"allow_sampling"`
	AllowLogprobs      bool    `json:"allow_logprobs"`
	AllowSearchIndices bool    `json:"allow_search_indices"`
	AllowView          bool    `json:"allow_view"`
	AllowFineTuning    bool    `json:"allow_fine_tuning"`
	Organization       string  `json:"organization"`
	Group              *string `json:"group"`
	IsBlocking         bool    `json:"is_blocking"`
}

func (e *Engine) serveModels(w http.ResponseWriter, r *http.Request) {
	now := time.Now().Unix()
	list := modelList{Object: "list"}
	for _, m := range e.opts.Models {
		list.Data = append(list.Data, modelCard{
			ID: m, Object: "model", Created: now, OwnedBy: "vllm", Root: m, MaxModelLen: &e.opts.MaxModelLen,
			Permission: []modelPermission{newPermission(now)},
		})
	}
	list.Data = append(list.Data, e.loraCards(now)...)
	writeJSON(w, http.StatusOK, list)
}

func newPermission(now int64) modelPermission {
	return modelPermission{ID: "modelperm-" + strings.ReplaceAll(uuid.NewString(), "-", ""), Object: "model_permission", Created: now,
		AllowSampling: true, AllowLogprobs: true, AllowView: true, Organization: "*"}
}

func (e *Engine) serveVersion(w http.ResponseWriter, r *http.Request) {
	writeJSON(w, http.StatusOK, map[string]string{"version": e.kvConfig().Version})
}

func (e *Engine) serveMetrics(w http.ResponseWriter, r *http.Request) {
	if f := e.metricsFault.Load(); f != nil {
		if f.Delay > 0 {
			t := time.NewTimer(f.Delay)
			select {
			case <-t.C:
			case <-r.Context().Done():
				t.Stop()
				return
			}
		}
		if f.Status != 0 {
			simulatedError(f.Status).write(w)
			return
		}
	}
	w.Header().Set("Content-Type", "text/plain; version=0.0.4; charset=utf-8")
	_, _ = w.Write(e.appendMetrics(nil))
}

func (e *Engine) serveStats(w http.ResponseWriter, r *http.Request) {
	writeJSON(w, http.StatusOK, e.Stats())
}

// recordedView is a RecordedRequest with its body as text, for curl.
type recordedView struct {
	Leg    string            `json:"leg"`
	Path   string            `json:"path"`
	Header map[string]string `json:"header"`
	Body   string            `json:"body"`
	At     time.Time         `json:"at"`
}

func (e *Engine) serveRecorded(w http.ResponseWriter, r *http.Request) {
	recs := e.Requests()
	out := make([]recordedView, len(recs))
	for i, rec := range recs {
		out[i] = recordedView{Leg: rec.Leg, Path: rec.Path, Header: rec.Header, Body: string(rec.Body), At: rec.At}
	}
	writeJSON(w, http.StatusOK, out)
}

func (e *Engine) serveResetRecorded(w http.ResponseWriter, r *http.Request) {
	e.ResetRecorded()
	w.WriteHeader(http.StatusNoContent)
}

func (e *Engine) serveFaults(w http.ResponseWriter, r *http.Request) {
	writeJSON(w, http.StatusOK, map[string]any{"faults": e.faults.list()})
}

// serveInjectFault takes {"fault": "<leg>.<fault>[=<arg>]", "count": N}; a missing
// or non-positive count means until cleared.
func (e *Engine) serveInjectFault(w http.ResponseWriter, r *http.Request) {
	var req struct {
		Fault string `json:"fault"`
		Count int    `json:"count"`
	}
	body, err := io.ReadAll(io.LimitReader(r.Body, 1<<20))
	if err == nil {
		err = json.Unmarshal(body, &req)
	}
	if err != nil {
		invalidRequest("", "want {\"fault\": \"<leg>.<fault>[=<arg>]\", \"count\": N}: "+err.Error()).write(w)
		return
	}
	if err := e.faults.add(req.Fault, req.Count); err != nil {
		newError(http.StatusBadRequest, "fault", err.Error()).write(w)
		return
	}
	e.serveFaults(w, r)
}

func (e *Engine) serveClearFaults(w http.ResponseWriter, r *http.Request) {
	e.ClearFaults()
	e.serveFaults(w, r)
}

func (e *Engine) serveRestart(w http.ResponseWriter, r *http.Request) {
	e.Restart()
	writeJSON(w, http.StatusOK, e.Info())
}

// serveSetHealth takes {"dead": true|false}.
func (e *Engine) serveSetHealth(w http.ResponseWriter, r *http.Request) {
	var req struct {
		Dead *bool `json:"dead"`
	}
	body, err := io.ReadAll(io.LimitReader(r.Body, 1<<20))
	if err == nil {
		err = json.Unmarshal(body, &req)
	}
	if err != nil || req.Dead == nil {
		invalidRequest("dead", "want {\"dead\": true|false}").write(w)
		return
	}
	e.SetDead(*req.Dead)
	writeJSON(w, http.StatusOK, map[string]bool{"dead": *req.Dead})
}

// serveSetMetricsFault takes {"status": CODE, "delay_ms": MS}; either may be 0.
func (e *Engine) serveSetMetricsFault(w http.ResponseWriter, r *http.Request) {
	var req struct {
		Status  int `json:"status"`
		DelayMS int `json:"delay_ms"`
	}
	body, err := io.ReadAll(io.LimitReader(r.Body, 1<<20))
	if err == nil {
		err = json.Unmarshal(body, &req)
	}
	if err != nil || req.DelayMS < 0 || req.Status != 0 && (req.Status < 400 || req.Status > 599) {
		invalidRequest("", `want {"status": 400..599 or 0, "delay_ms": N >= 0}`).write(w)
		return
	}
	e.SetMetricsFault(&MetricsFault{Status: req.Status, Delay: time.Duration(req.DelayMS) * time.Millisecond})
	writeJSON(w, http.StatusOK, req)
}

func (e *Engine) serveClearMetricsFault(w http.ResponseWriter, r *http.Request) {
	e.SetMetricsFault(nil)
	w.WriteHeader(http.StatusNoContent)
}
