package tests

import (
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/narwhal-router/narwhal/bench/sim"
	"github.com/narwhal-router/narwhal/bench/sim/tokenizer"
	"github.com/narwhal-router/narwhal/config"
)

// Issue 18: the rest of the OpenAI surface. Validation that needs no engine, GET
// /v1/models/{id}, client API keys, the passthrough endpoints (one engine, the body byte for
// byte) and /v1/responses on the prefill/decode path, all through a simulated fleet.

func TestValidationRefusesBeforeAnyEngineWork(t *testing.T) {
	h := start(t, setup{prefill: 1, decode: 1, engine: sim.Options{Tokens: 4}})
	cases := []struct {
		path, body, param string
	}{
		{"/v1/completions", `{"model":"sim-model","prompt":"hi","stream_options":{"include_usage":true}}`, "stream_options"},
		{"/v1/chat/completions", `{"model":"sim-model","messages":[{"role":"user","content":"hi"}],"stream":false,"stream_options":{}}`, "stream_options"},
		{"/v1/completions", `{"model":"sim-model","prompt":"hi","max_tokens":2,"min_tokens":5}`, "min_tokens"},
		{"/v1/chat/completions", `{"model":"sim-model","messages":[{"role":"user","content":"hi"}],"max_completion_tokens":2,"min_tokens":3}`, "min_tokens"},
		{"/v1/completions", `{"model":"sim-model","prompt":"hi","min_tokens":-1}`, "min_tokens"},
		{"/v1/responses", `{"model":"sim-model"}`, "input"},
		{"/v1/responses", `{"model":"sim-model","input":3}`, "input"},
		{"/v1/responses", `{"model":"sim-model","input":"hi","instructions":[1]}`, "instructions"},
		{"/v1/responses", `{"model":"sim-model","input":"hi","previous_response_id":"resp_1"}`, "previous_response_id"},
		{"/v1/responses", `{"model":"sim-model","input":"hi","store":true}`, "store"},
		{"/v1/responses", `{"model":"sim-model","input":"hi","background":true}`, "background"},
		{"/v1/responses", `{"model":"sim-model","input":"hi","max_output_tokens":0}`, "max_output_tokens"},
		{"/v1/responses", `{"model":"sim-model","input":"hi","stream_options":{"include_usage":true}}`, "stream_options"},
		{"/v1/embeddings", `[1,2]`, ""},
		{"/v1/embeddings", `{"model":"","input":"hi"}`, "model"},
	}
	for _, tc := range cases {
		r := h.send(tc.path, tc.body)
		e := expectError(t, r, 400, "invalid_request", "")
		got := ""
		if e.Param != nil {
			got = *e.Param
		}
		if got != tc.param || (tc.param != "" && !strings.Contains(e.Message, tc.param)) {
			t.Errorf("%s %s: param %q message %q, want the field %q named", tc.path, tc.body, got, e.Message, tc.param)
		}
	}
	h.expectLegs(0, 0)
	if n := len(h.legs("other")); n != 0 {
		t.Fatalf("the fleet saw %d other requests", n)
	}
	// The minimum within the maximum runs.
	if r := h.send("/v1/completions", `{"model":"sim-model","prompt":"hi","max_tokens":3,"min_tokens":3}`); r.status != 200 {
		t.Fatalf("min_tokens == max_tokens: %d %s", r.status, r.body)
	}
}

func TestRetrieveModel(t *testing.T) {
	h := start(t, setup{prefill: 1, decode: 1})
	resp, err := h.client.Get(h.base + "/v1/models/sim-model")
	if err != nil {
		t.Fatal(err)
	}
	b, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	var m struct{ ID, Object, OwnedBy string }
	if resp.StatusCode != 200 || json.Unmarshal(b, &m) != nil || m.ID != "sim-model" || m.Object != "model" {
		t.Fatalf("GET /v1/models/sim-model: %d %s", resp.StatusCode, b)
	}
	resp, err = h.client.Get(h.base + "/v1/models/no-such-model")
	if err != nil {
		t.Fatal(err)
	}
	b, _ = io.ReadAll(resp.Body)
	resp.Body.Close()
	expectError(t, result{status: resp.StatusCode, header: resp.Header, body: b}, 404, "model_not_found", "the model `no-such-model` does not exist")
}

// authed is a harness whose client listener needs one of two API keys, one from a file.
func authed(t *testing.T, limit int) (*harness, string) {
	const fileKey = "sk-from-file-0123456789"
	file := t.TempDir() + "/keys"
	if err := os.WriteFile(file, []byte("# client keys\n"+fileKey+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	h := start(t, setup{prefill: 1, decode: 1, engine: sim.Options{Tokens: 4}, config: func(c *config.Config) {
		c.Server.APIKeys = []string{"sk-listed-abcdef"}
		c.Server.APIKeysFile = file
		c.Server.APIKeyMaxConcurrency = limit
	}})
	return h, fileKey
}

func TestAPIKeys(t *testing.T) {
	h, key := authed(t, 0)
	body := completion("hi", false)
	r := h.send("/v1/completions", body)
	expectError(t, r, 401, "invalid_api_key", "missing API key")
	r = h.send("/v1/completions", body, "Authorization", "Bearer sk-wrong")
	expectError(t, r, 401, "invalid_api_key", "incorrect API key")
	if r.header.Get("WWW-Authenticate") == "" {
		t.Error("401 without WWW-Authenticate")
	}
	r = h.send("/v1/models", "", "Authorization", "Basic "+key)
	expectError(t, r, 401, "invalid_api_key", "missing API key")
	h.expectLegs(0, 0)

	for _, k := range []string{key, "sk-listed-abcdef"} {
		r = h.send("/v1/completions", body, "Authorization", "Bearer "+k)
		if r.status != 200 {
			t.Fatalf("right key: %d %s", r.status, r.body)
		}
		h.expectAccess(r.id, 200, 1, "")
	}
	req, _ := http.NewRequest("GET", h.base+"/v1/models/sim-model", nil)
	req.Header.Set("Authorization", "Bearer "+key)
	resp, err := h.client.Do(req)
	if err != nil || resp.StatusCode != 200 {
		t.Fatalf("models/{id} with the key: %v %v", resp, err)
	}
	resp.Body.Close()
	// /health needs no key.
	resp, err = h.client.Get(h.base + "/health")
	if err != nil || resp.StatusCode != 200 {
		t.Fatalf("/health: %v %v", resp, err)
	}
	resp.Body.Close()
	if m := h.scrape(); !strings.Contains(m, `status="401"`) {
		t.Errorf("the 401s are not in the metrics:\n%s", m)
	}
	if log := string(h.access.Bytes()); strings.Contains(log, key) || strings.Contains(log, "sk-listed") || strings.Contains(log, "sk-wrong") {
		t.Fatalf("a key is in the access log:\n%s", log)
	}
}

func TestAPIKeyConcurrencyLimit(t *testing.T) {
	h, key := authed(t, 1)
	auth := []string{"Authorization", "Bearer " + key}
	// A stream that holds its slot: its engine is silent after the headers until the hang-up.
	id, respc, cancel := h.startRequest("/v1/completions", completion("@sim:decode.silence_after=1", true), auth...)
	resp := <-respc
	if resp == nil || resp.StatusCode != 200 {
		t.Fatalf("first stream: %v", resp)
	}
	readEvents(t, resp.Body, 1)
	r := h.send("/v1/completions", completion("hi", false), auth...)
	expectError(t, r, 429, "rate_limit_exceeded", "this API key has too many requests in flight")
	if r.header.Get("Retry-After") != "1" {
		t.Fatalf("429 without Retry-After: %v", r.header)
	}
	// Another key is not held back.
	if r := h.send("/v1/completions", completion("hi", false), "Authorization", "Bearer sk-listed-abcdef"); r.status != 200 {
		t.Fatalf("the other key: %d %s", r.status, r.body)
	}
	cancel()
	resp.Body.Close()
	h.accessLine(id)
	// The slot is back once the stream ended.
	eventually(t, 3*time.Second, func() bool {
		return h.send("/v1/completions", completion("hi", false), auth...).status == 200
	}, func() string { return "the key's slot was not given back after the stream ended" })
}

// passthrough bodies, one per endpoint.
var passthroughCases = []struct{ path, body, want string }{
	{"/v1/embeddings", `{"model":"sim-model","input":["one two","three"] , "encoding_format":"float"}`, `"object":"embedding"`},
	{"/tokenize", `{"prompt":"` + words("tok", 3) + `"}`, `"count":3`}, // three one-token words
	{"/detokenize", `{"model":"sim-model","tokens":` + strings.ReplaceAll(fmt.Sprint(tokenizer.Default().Encode(" alpha beta")), " ", ",") + `}`, `{"prompt":" alpha beta"}`},
	{"/v1/score", `{"model":"sim-model","text_1":"a b","text_2":["a","c"]}`, `"object":"score","score":1.0`},
	{"/v1/rerank", `{"model":"sim-model","query":"a b","documents":["c","a b"],"top_n":1}`, `"results":[{"index":1,"document":{"text":"a b"},"relevance_score":1.0}]`},
	{"/rerank", `{"query":"a","documents":["a"]}`, `"relevance_score":1.0`},
	{"/v2/rerank", `{"model":"sim-model","query":"a","documents":["b"]}`, `"relevance_score":0.0`},
}

func TestPassthroughForwardsBodiesByteForByte(t *testing.T) {
	h := start(t, setup{prefill: 1, decode: 1, config: routingHeaders})
	d0 := h.simEngine("d0")
	for _, tc := range passthroughCases {
		d0.ResetRecorded()
		r := h.send(tc.path, tc.body)
		if r.status != 200 || !strings.Contains(string(r.body), tc.want) {
			t.Fatalf("%s: %d %s, want %s", tc.path, r.status, r.body, tc.want)
		}
		if r.header.Get("x-narwhal-consumer") != "d0" || r.header.Get("x-narwhal-producer") != "" {
			t.Errorf("%s ran on producer %q consumer %q", tc.path, r.header.Get("x-narwhal-producer"), r.header.Get("x-narwhal-consumer"))
		}
		recs := d0.Requests()
		if len(recs) != 1 || recs[0].Path != tc.path || string(recs[0].Body) != tc.body {
			t.Fatalf("%s: the engine received %d requests: %+v", tc.path, len(recs), recs)
		}
		// The engine's answer, byte for byte: the same request sent to the engine directly.
		req, _ := http.NewRequest("POST", d0.URL()+tc.path, strings.NewReader(tc.body))
		req.Header.Set("Content-Type", "application/json")
		req.Header.Set("X-Request-Id", recs[0].Get("X-Request-Id"))
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		direct, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if !bytes.Equal(sansCreated(direct), sansCreated(r.body)) {
			t.Errorf("%s: the router's answer\n%s\nis not the engine's\n%s", tc.path, r.body, direct)
		}
		l := h.expectAccess(r.id, 200, 1, "")
		if str(l["endpoint"]) == "" {
			t.Errorf("%s: access log without endpoint: %v", tc.path, l)
		}
	}
	if p := len(h.simEngine("p0").Requests()); p != 0 {
		t.Fatalf("the producer saw %d requests", p)
	}
	m := h.scrape()
	for _, want := range []string{`endpoint="embeddings"`, `endpoint="tokenize"`, `endpoint="rerank_v2"`} {
		if !strings.Contains(m, want) {
			t.Errorf("metrics lack %s", want)
		}
	}
	// The engine's 4xx is the client's.
	r := h.send("/v1/embeddings", `{"model":"sim-model","input":42}`)
	if r.status != 400 || envelope(t, r.body).Param == nil {
		t.Fatalf("engine 400: %d %s", r.status, r.body)
	}
}

// sansCreated drops the "created" timestamp, which may tick between two calls.
func sansCreated(b []byte) []byte {
	s := string(b)
	if i := strings.Index(s, `"created":`); i >= 0 {
		j := i + len(`"created":`)
		for j < len(s) && s[j] >= '0' && s[j] <= '9' {
			j++
		}
		s = s[:i] + s[j:]
	}
	return []byte(s)
}

func TestPassthroughFaultsAreRetriedAndBounded(t *testing.T) {
	cases := []struct {
		fault, kind string
	}{
		{"decode.status=500", "engine_status"},
		{"decode.refuse", "unreachable"},
		{"decode.hang_headers", "timeout"},
		{"decode.close_after=0", "unreachable"},
	}
	for _, tc := range cases {
		t.Run(tc.fault, func(t *testing.T) {
			t.Parallel()
			h := retryHarness(t, retries(2), func(c *config.Config) { c.Engine.PassthroughTimeoutS = 0.3 })
			h.inject("d0", tc.fault, 1)
			r := h.send("/v1/embeddings", `{"model":"sim-model","input":"hi"}`)
			if r.status != 200 {
				t.Fatalf("%d %s", r.status, r.body)
			}
			l := h.accessLine(r.id)
			if int(num(l["attempts"])) != 2 || (tc.kind != "unreachable" && str(l["error_kind"]) != tc.kind) {
				t.Fatalf("access log %v, want 2 attempts after %s", l, tc.kind)
			}
		})
	}
	t.Run("timeout", func(t *testing.T) {
		t.Parallel()
		h := retryHarness(t, func(c *config.Config) { c.Engine.PassthroughTimeoutS = 0.3 })
		h.inject("d0", "decode.hang_headers", 1)
		r := h.send("/tokenize", `{"model":"sim-model","prompt":"hi"}`)
		expectError(t, r, 504, "timeout", "engine did not answer within engine.passthrough_timeout_s")
		if r.elapsed > 3*time.Second {
			t.Fatalf("took %v", r.elapsed)
		}
		h.expectAccess(r.id, 504, 1, "timeout")
	})
}

func TestPassthroughClientHangUp(t *testing.T) {
	h := start(t, setup{prefill: 1, decode: 1})
	h.inject("d0", "decode.hang_headers", 1)
	id, _, cancel := h.startRequest("/v1/score", `{"model":"sim-model","text_1":"a","text_2":"b"}`)
	eventually(t, 3*time.Second, func() bool { return h.requestPhase(id) != "" }, func() string { return "the request never started" })
	cancel()
	l := h.accessLine(id)
	if str(l["outcome"]) == "" || int(num(l["status"])) == 200 {
		t.Fatalf("access log after a hang-up: %v", l)
	}
	// Reservations are checked at cleanup; the router is still serving.
	if r := h.send("/v1/score", `{"model":"sim-model","text_1":"a","text_2":"a"}`); r.status != 200 {
		t.Fatalf("after the hang-up: %d %s", r.status, r.body)
	}
}

func TestPassthroughNeedsNoProducer(t *testing.T) {
	h := start(t, setup{prefill: 1, decode: 1})
	if code, body := h.adminDo("POST", "/engines/p0/eject?reason=test"); code != 200 {
		t.Fatalf("eject p0: %d %s", code, body)
	}
	r := h.send("/v1/embeddings", `{"model":"sim-model","input":"hi"}`)
	if r.status != 200 {
		t.Fatalf("embeddings without a producer: %d %s", r.status, r.body)
	}
	if l := h.expectAccess(r.id, 200, 1, ""); str(l["consumer"]) != "d0" || l["producer"] != nil {
		t.Fatalf("access log %v", l)
	}
	expectError(t, h.send("/v1/completions", completion("hi", false)), 503, "no_engine", "")
}
