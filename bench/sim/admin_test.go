package sim

import (
	"net/http"
	"strings"
	"testing"
	"time"

	json "github.com/goccy/go-json"
)

func TestHealthModelsVersionMetrics(t *testing.T) {
	t.Parallel()
	e := startEngine(t, Options{Models: []string{"a", "b"}, MaxModelLen: 1234, Version: "0.9.2"})

	if code, _, body := get(t, e.URL()+"/health"); code != 200 || len(body) != 0 {
		t.Errorf("/health: %d %q", code, body)
	}
	if code, _, body := post(t, e.URL(), "/sim/health", `{"dead":true}`); code != 200 || string(body) != `{"dead":true}` {
		t.Errorf("POST /sim/health: %d %s", code, body)
	}
	if code, _, body := get(t, e.URL()+"/health"); code != 503 || len(body) != 0 {
		t.Errorf("/health when dead: %d %q", code, body)
	}
	e.SetDead(false)
	if code, _, _ := get(t, e.URL()+"/health"); code != 200 {
		t.Errorf("/health when alive again: %d", code)
	}

	_, _, body := get(t, e.URL()+"/v1/models")
	var models struct {
		Object string
		Data   []struct {
			ID          string `json:"id"`
			MaxModelLen int    `json:"max_model_len"`
		}
	}
	if err := json.Unmarshal(body, &models); err != nil || models.Object != "list" || len(models.Data) != 2 ||
		models.Data[1].ID != "b" || models.Data[0].MaxModelLen != 1234 {
		t.Errorf("/v1/models: %s", body)
	}
	if _, _, body := get(t, e.URL()+"/version"); string(body) != `{"version":"0.9.2"}` {
		t.Errorf("/version: %s", body)
	}

	if code, _, body := post(t, e.URL(), "/v1/completions", strings.Replace(prefillBody(fortyWords), "sim-model", "a", 1)); code != 200 {
		t.Fatalf("prefill: %d %s", code, body)
	}
	code, hdr, body := get(t, e.URL()+"/metrics")
	for _, want := range []string{
		"# TYPE vllm:num_requests_running gauge\n",
		`vllm:num_requests_running{engine="0",model_name="a"} 0.0` + "\n",
		`vllm:num_requests_waiting{engine="0",model_name="a"} 0.0` + "\n",
		`vllm:kv_cache_usage_perc{engine="0",model_name="a"} `,
	} {
		if code != 200 || !strings.HasPrefix(hdr.Get("Content-Type"), "text/plain") || !strings.Contains(string(body), want) {
			t.Errorf("/metrics %d lacks %q:\n%s", code, want, body)
		}
	}
	if strings.Contains(string(body), `kv_cache_usage_perc{engine="0",model_name="a"} 0.0`+"\n") {
		t.Errorf("kv_cache_usage_perc ignores the 3 pinned blocks:\n%s", body)
	}
	if code, _, body := get(t, e.URL()+"/nope"); code != 404 || string(body) != `{"detail":"Not Found"}` {
		t.Errorf("unknown route: %d %s", code, body)
	}
}

func TestStatsEndpoint(t *testing.T) {
	t.Parallel()
	e := startEngine(t, Options{Role: RolePrefill, EngineID: "p-fixed", Name: "p9"})
	post(t, e.URL(), "/v1/completions", prefillBody("x"))
	post(t, e.URL(), "/v1/completions", completions("x"))
	_, _, body := get(t, e.URL()+"/sim/stats")
	var got map[string]any
	if err := json.Unmarshal(body, &got); err != nil {
		t.Fatal(err)
	}
	want := map[string]any{"engine_id": "p-fixed", "role": "prefill", "name": "p9", "prefill_requests": 1.0,
		"decode_requests": 1.0, "aborted": 0.0, "blocks_pinned": 1.0, "blocks_read": 0.0, "blocks_expired": 0.0,
		"in_flight": 0.0, "completed": 2.0}
	for k, v := range want {
		if got[k] != v {
			t.Errorf("/sim/stats %s = %v, want %v (%s)", k, got[k], v, body)
		}
	}
}

func TestRecordedRequests(t *testing.T) {
	t.Parallel()
	e := startEngine(t, Options{Tokens: 1})
	body := prefillBody("hello")
	post(t, e.URL(), "/v1/completions", body, "X-Request-Id", "r1", "Authorization", "Bearer k",
		"traceparent", "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01")
	post(t, e.URL(), "/v1/chat/completions", `{"messages":[{"role":"user","content":"x"}]}`)
	post(t, e.URL(), "/v1/completions", `{bad json`)
	get(t, e.URL()+"/health")
	get(t, e.URL()+"/sim/stats") // admin calls are not recorded

	recs := e.Requests()
	if len(recs) != 4 {
		t.Fatalf("recorded %d requests, want 4: %+v", len(recs), recs)
	}
	r := recs[0]
	if r.Leg != "prefill" || r.Path != "/v1/completions" || string(r.Body) != body ||
		r.Get("x-request-id") != "r1" || r.Header["X-Request-Id"] != "r1" || r.Get("Authorization") != "Bearer k" ||
		r.Get("TRACEPARENT") == "" || r.Get("Content-Type") != "application/json" || time.Since(r.At) > time.Minute {
		t.Errorf("first record %+v", r)
	}
	if legs := []string{recs[1].Leg, recs[2].Leg, recs[3].Leg}; legs[0] != "decode" || legs[1] != "other" || legs[2] != "other" {
		t.Errorf("legs %v, want decode other other", legs)
	}
	r.Body[0] = 'X' // a copy: changing it changes nothing inside
	if e.Requests()[0].Body[0] != '{' {
		t.Error("Requests shares body bytes with the engine")
	}

	_, _, view := get(t, e.URL()+"/sim/requests")
	if !strings.Contains(string(view), `"body":"{\"model\":\"sim-model\"`) {
		t.Errorf("/sim/requests: %.300s", view)
	}
	e.ResetRecorded()
	if n := len(e.Requests()); n != 0 {
		t.Errorf("%d records after ResetRecorded", n)
	}
}

func TestRecorderKeepsTheLast1024(t *testing.T) {
	t.Parallel()
	var r recorder
	for i := range recordLimit + 5 {
		r.add(RecordedRequest{Path: itoa(i)})
	}
	got := r.list()
	if len(got) != recordLimit || got[0].Path != "5" || got[recordLimit-1].Path != itoa(recordLimit+4) {
		t.Errorf("ring holds %d from %s to %s", len(got), got[0].Path, got[len(got)-1].Path)
	}
}

func TestRestartAndDeadViaGoAPI(t *testing.T) {
	t.Parallel()
	e := startEngine(t, Options{EngineID: "fixed"})
	if e.EngineID() != "fixed" {
		t.Fatalf("engine id %q", e.EngineID())
	}
	e.Restart()
	if id := e.EngineID(); id == "fixed" || len(id) != 36 {
		t.Errorf("after Restart the engine id is %q, want a fresh UUID", id)
	}
	req, _ := http.NewRequest(http.MethodGet, e.URL()+"/health", nil)
	e.SetDead(true)
	if code, _, _ := do(t, req); code != 503 {
		t.Errorf("dead engine health %d", code)
	}
}
