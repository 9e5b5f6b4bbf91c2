package tests

import (
	"bytes"
	"encoding/json"
	"strings"
	"testing"

	"github.com/narwhal-router/narwhal/bench/sim"
	"github.com/narwhal-router/narwhal/config"
)

// expectedText is what the simulator generates for n tokens.
func expectedText(n int) string {
	var b strings.Builder
	for i := 0; i < n; i++ {
		b.WriteString(sim.TokenText(i))
	}
	return b.String()
}

func TestStreamingAndNonStreamingOnBothEndpoints(t *testing.T) {
	h := start(t, setup{engine: sim.Options{Tokens: 6}})
	cases := []struct {
		name, path, body string
		check            func(t *testing.T, ctype string, body []byte)
	}{
		{"completions streaming", "/v1/completions", `{"model":"sim-model","prompt":"Say hi","max_tokens":5,"stream":true}`,
			func(t *testing.T, ctype string, body []byte) {
				evs := sseEvents(t, body)
				if evs[len(evs)-1] != "[DONE]" {
					t.Fatalf("stream does not end with [DONE]: %q", evs[len(evs)-1])
				}
				var text strings.Builder
				for _, e := range evs[:len(evs)-1] {
					var c struct {
						Object  string `json:"object"`
						Choices []struct {
							Text string `json:"text"`
						} `json:"choices"`
						Usage any `json:"usage"`
					}
					mustJSON(t, e, &c)
					if c.Usage != nil {
						t.Fatalf("usage chunk relayed to a client that did not ask for it: %s", e)
					}
					if c.Object != "text_completion" {
						t.Fatalf("object = %q", c.Object)
					}
					text.WriteString(c.Choices[0].Text)
				}
				if got, want := text.String(), expectedText(5); got != want {
					t.Fatalf("text = %q, want %q", got, want)
				}
			}},
		{"completions streaming with usage", "/v1/completions", `{"model":"sim-model","prompt":"Say hi","max_tokens":3,"stream":true,"stream_options":{"include_usage":true}}`,
			func(t *testing.T, ctype string, body []byte) {
				evs := sseEvents(t, body)
				if len(evs) < 2 || evs[len(evs)-1] != "[DONE]" || !strings.Contains(evs[len(evs)-2], `"usage":{`) {
					t.Fatalf("want the usage chunk right before [DONE], got %q", evs)
				}
				var u struct {
					Usage struct {
						CompletionTokens int `json:"completion_tokens"`
					} `json:"usage"`
				}
				mustJSON(t, evs[len(evs)-2], &u)
				if u.Usage.CompletionTokens != 3 {
					t.Fatalf("completion_tokens = %d, want 3", u.Usage.CompletionTokens)
				}
			}},
		{"chat streaming", "/v1/chat/completions", `{"model":"sim-model","messages":[{"role":"user","content":"Say hi"}],"max_completion_tokens":4,"stream":true}`,
			func(t *testing.T, ctype string, body []byte) {
				evs := sseEvents(t, body)
				if !strings.Contains(evs[0], `"delta":{"role":"assistant","content":""}`) {
					t.Fatalf("first chat event is not the role delta: %s", evs[0])
				}
				var text strings.Builder
				for _, e := range evs[1 : len(evs)-1] {
					var c struct {
						Choices []struct {
							Delta struct {
								Content string `json:"content"`
							} `json:"delta"`
						} `json:"choices"`
					}
					mustJSON(t, e, &c)
					text.WriteString(c.Choices[0].Delta.Content)
				}
				if got, want := text.String(), expectedText(4); got != want {
					t.Fatalf("content = %q, want %q", got, want)
				}
				if evs[len(evs)-1] != "[DONE]" {
					t.Fatal("no [DONE]")
				}
			}},
		{"completions non-streaming", "/v1/completions", `{"model":"sim-model","prompt":"Say hi","max_tokens":5}`,
			func(t *testing.T, ctype string, body []byte) {
				var r struct {
					Object  string `json:"object"`
					Choices []struct {
						Text         string `json:"text"`
						FinishReason string `json:"finish_reason"`
					} `json:"choices"`
					Usage struct {
						CompletionTokens int `json:"completion_tokens"`
					} `json:"usage"`
				}
				mustJSON(t, string(body), &r)
				if r.Object != "text_completion" || r.Choices[0].Text != expectedText(5) || r.Choices[0].FinishReason != "length" || r.Usage.CompletionTokens != 5 {
					t.Fatalf("response = %s", body)
				}
			}},
		{"chat non-streaming", "/v1/chat/completions", `{"model":"sim-model","messages":[{"role":"user","content":"Say hi"}]}`,
			func(t *testing.T, ctype string, body []byte) {
				var r struct {
					Object  string `json:"object"`
					Choices []struct {
						Message struct {
							Role    string `json:"role"`
							Content string `json:"content"`
						} `json:"message"`
						FinishReason string `json:"finish_reason"`
					} `json:"choices"`
				}
				mustJSON(t, string(body), &r)
				if r.Object != "chat.completion" || r.Choices[0].Message.Role != "assistant" ||
					r.Choices[0].Message.Content != expectedText(6) || r.Choices[0].FinishReason != "stop" {
					t.Fatalf("response = %s", body)
				}
			}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			resp, body := h.post(tc.path, tc.body)
			if resp.StatusCode != 200 {
				t.Fatalf("status %d: %s", resp.StatusCode, body)
			}
			ct := resp.Header.Get("Content-Type")
			if strings.Contains(tc.body, `"stream":true`) != strings.HasPrefix(ct, "text/event-stream") {
				t.Fatalf("content type %q", ct)
			}
			if st := resp.Header.Get("Server-Timing"); !strings.Contains(st, "ttft;dur=") || !strings.Contains(st, "first_byte;dur=") {
				t.Fatalf("Server-Timing = %q", st)
			}
			tc.check(t, ct, body)
		})
	}
}

func TestLegBodiesFollowTheWireContract(t *testing.T) {
	h := start(t, setup{engine: sim.Options{Tokens: 4}})
	client := `{"model":"sim-model","prompt":"Explain disaggregated prefill.","max_tokens":3,"min_tokens":2,"temperature":0.7,"top_p":0.95,"seed":7,"stream":true,"stream_options":{"include_usage":true},"kv_transfer_params":{"remote_host":"attacker.example","do_remote_prefill":true}}`
	resp, body := h.post("/v1/completions", client, "X-Request-Id", "client-req-1")
	if resp.StatusCode != 200 {
		t.Fatalf("status %d: %s", resp.StatusCode, body)
	}
	if got := resp.Header.Get("X-Request-Id"); got != "client-req-1" {
		t.Fatalf("x-request-id = %q, want the client's", got)
	}
	prefills, decodes := h.legs("prefill"), h.legs("decode")
	if len(prefills) != 1 || len(decodes) != 1 {
		t.Fatalf("legs: %d prefill, %d decode", len(prefills), len(decodes))
	}
	p, d := prefills[0], decodes[0]

	var pb map[string]json.RawMessage
	mustJSON(t, string(p.Body), &pb)
	want := map[string]string{
		"max_tokens": "1", "stream": "false", "temperature": "0.7", "seed": "7",
		"kv_transfer_params": `{"do_remote_decode":true,"do_remote_prefill":false,"remote_engine_id":null,"remote_block_ids":null,"remote_host":null,"remote_port":null}`,
	}
	for k, v := range want {
		if string(pb[k]) != v {
			t.Errorf("prefill %s = %s, want %s", k, pb[k], v)
		}
	}
	for _, k := range []string{"stream_options", "min_tokens", "min_completion_tokens"} {
		if _, ok := pb[k]; ok {
			t.Errorf("prefill body still has %s", k)
		}
	}

	var db map[string]json.RawMessage
	mustJSON(t, string(d.Body), &db)
	for k, v := range map[string]string{"max_tokens": "3", "min_tokens": "2", "temperature": "0.7", "top_p": "0.95",
		"seed": "7", "stream": "true", "stream_options": `{"include_usage":true}`, "prompt": `"Explain disaggregated prefill."`} {
		if string(db[k]) != v {
			t.Errorf("decode %s = %s, want %s", k, db[k], v)
		}
	}
	if bytes.Contains(d.Body, []byte("attacker")) || bytes.Contains(p.Body, []byte("attacker")) {
		t.Fatal("client kv_transfer_params reached an engine")
	}
	var desc map[string]any
	mustJSON(t, string(db["kv_transfer_params"]), &desc)
	if desc["do_remote_prefill"] != true || desc["remote_engine_id"] == nil || desc["remote_request_id"] == nil {
		t.Fatalf("decode descriptor = %s", db["kv_transfer_params"])
	}

	if p.Get("X-Request-Id") == "" || p.Get("X-Request-Id") != d.Get("X-Request-Id") {
		t.Fatalf("backend request ids differ: prefill %q decode %q", p.Get("X-Request-Id"), d.Get("X-Request-Id"))
	}
	if p.Get("X-Request-Id") == "client-req-1" {
		t.Fatal("the client's request id was reused as the backend id")
	}
	for _, r := range []sim.RecordedRequest{p, d} {
		if r.Get("Authorization") != "" || r.Get("Content-Type") != "application/json" {
			t.Fatalf("engine headers: %v", r.Header)
		}
	}
}

func TestDecodeGetsTheProducersDescriptorByteForByte(t *testing.T) {
	h := start(t, setup{engine: sim.Options{Tokens: 2, KVLayout: sim.KVLayoutGrouped,
		DescriptorExtra: `"x_future":{"nested":[1,{"b":null}],"f":1.50},"zz_lane":"fast lane \u00e9"`}})
	resp, body := h.post("/v1/chat/completions", `{"model":"sim-model","messages":[{"role":"user","content":"one two three"}],"stream":true}`)
	if resp.StatusCode != 200 {
		t.Fatalf("status %d: %s", resp.StatusCode, body)
	}
	d := h.legs("decode")[0]
	var db map[string]json.RawMessage
	mustJSON(t, string(d.Body), &db)
	produced := h.producedDescriptors()
	if len(produced) != 1 {
		t.Fatalf("%d descriptors produced", len(produced))
	}
	if !bytes.Contains(produced[0], []byte(`"zz_lane":"fast lane \u00e9"`)) {
		t.Fatalf("the simulator did not add the unknown fields: %s", produced[0])
	}
	if !bytes.Equal(db["kv_transfer_params"], produced[0]) {
		t.Fatalf("decode descriptor differs from the producer's\n got %s\nwant %s", db["kv_transfer_params"], produced[0])
	}
}

func TestSameWorkerDecodeStripsAllTransferParams(t *testing.T) {
	h := start(t, setup{both: 1, engine: sim.Options{Tokens: 3}})
	resp, body := h.post("/v1/completions", `{"model":"sim-model","prompt":"x y","stream":true,"kv_transfer_params":{"do_remote_prefill":true,"remote_engine_id":"x","remote_block_ids":[1],"remote_host":"10.9.9.9","remote_port":1}}`)
	if resp.StatusCode != 200 {
		t.Fatalf("status %d: %s", resp.StatusCode, body)
	}
	d := h.legs("decode")
	if len(d) != 1 {
		t.Fatalf("%d decode legs", len(d))
	}
	if bytes.Contains(d[0].Body, []byte("kv_transfer_params")) {
		t.Fatalf("same-worker decode carried transfer params: %s", d[0].Body)
	}
	p := h.legs("prefill")[0]
	if bytes.Contains(p.Body, []byte("10.9.9.9")) {
		t.Fatalf("client transfer params reached the producer: %s", p.Body)
	}
	if st := h.fleet.Engines[0].Stats(); st.KVLoads != 0 {
		t.Fatalf("same-worker decode loaded KV remotely (%d loads)", st.KVLoads)
	}
}

func TestDecodePrefersAnotherEngineThanTheProducer(t *testing.T) {
	h := start(t, setup{both: 2, engine: sim.Options{Tokens: 1}})
	for i := 0; i < 10; i++ {
		if resp, body := h.post("/v1/completions", `{"model":"sim-model","prompt":"x"}`); resp.StatusCode != 200 {
			t.Fatalf("status %d: %s", resp.StatusCode, body)
		}
	}
	for _, l := range h.accessLines() {
		if l["producer"] == l["consumer"] {
			t.Fatalf("same-worker decode although another engine could decode: %v", l)
		}
	}
}

func TestLightSequentialTrafficSpreadsOverEngines(t *testing.T) {
	h := start(t, setup{prefill: 2, decode: 2, engine: sim.Options{Tokens: 1}})
	for i := 0; i < 40; i++ {
		h.post("/v1/completions", `{"model":"sim-model","prompt":"x"}`)
	}
	for _, e := range h.fleet.Engines {
		st := e.Stats()
		if st.PrefillRequests+st.DecodeRequests < 5 {
			t.Fatalf("engine %s got %d prefill + %d decode legs of 40 requests: ties are not broken at random",
				e.Name(), st.PrefillRequests, st.DecodeRequests)
		}
	}
}

func TestUnknownModelIs404(t *testing.T) {
	h := start(t, setup{})
	resp, body := h.post("/v1/completions", `{"model":"nope","prompt":"x"}`)
	if resp.StatusCode != 404 || !strings.Contains(string(body), `"code":"model_not_found"`) {
		t.Fatalf("status %d: %s", resp.StatusCode, body)
	}
	if n := len(h.legs("prefill")) + len(h.legs("decode")); n != 0 {
		t.Fatalf("%d engine legs for an unknown model", n)
	}
}

func TestBadRequestsNameTheField(t *testing.T) {
	h := start(t, setup{})
	cases := []struct{ body, field string }{
		{`{"prompt":"x"}`, "model"},
		{`{"model":"sim-model"}`, "prompt"},
		{`{"model":"sim-model","prompt":"x","max_tokens":-3}`, "max_tokens"},
		{`not json`, "JSON"},
	}
	for _, tc := range cases {
		resp, body := h.post("/v1/completions", tc.body)
		if resp.StatusCode != 400 || !strings.Contains(string(body), tc.field) {
			t.Errorf("%s: status %d body %s", tc.body, resp.StatusCode, body)
		}
	}
}

func TestModelsListsTheFleetsModels(t *testing.T) {
	h := start(t, setup{engine: sim.Options{Models: []string{"m-a", "m-b"}}})
	resp, err := h.client.Get(h.base + "/v1/models")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	var out struct {
		Data []struct {
			ID string `json:"id"`
		} `json:"data"`
	}
	if err := json.NewDecoder(resp.Body).Decode(&out); err != nil {
		t.Fatal(err)
	}
	if len(out.Data) != 2 || out.Data[0].ID != "m-a" || out.Data[1].ID != "m-b" {
		t.Fatalf("models = %+v", out.Data)
	}
}

func mustJSON(t *testing.T, s string, v any) {
	t.Helper()
	if err := json.Unmarshal([]byte(s), v); err != nil {
		t.Fatalf("not JSON (%v): %s", err, s)
	}
}

func TestEnginesGetOnlyAllowlistedHeaders(t *testing.T) {
	h := start(t, setup{prefill: 1, decode: 1, engine: sim.Options{Tokens: 1}, config: func(c *config.Config) {
		c.Engines[0].APIKey, c.Engines[1].APIKey = "p-key", "d-key"
	}})
	const tp = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"
	resp, body := h.post("/v1/completions", `{"model":"sim-model","prompt":"x"}`,
		"traceparent", tp, "tracestate", "vendor=1", "Authorization", "Bearer client-secret", "X-Secret", "nope", "Cookie", "a=b")
	if resp.StatusCode != 200 {
		t.Fatalf("status %d: %s", resp.StatusCode, body)
	}
	for _, leg := range []struct{ kind, key string }{{"prefill", "Bearer p-key"}, {"decode", "Bearer d-key"}} {
		r := h.legs(leg.kind)[0]
		if r.Get("Traceparent") != tp || r.Get("Tracestate") != "vendor=1" {
			t.Errorf("%s leg trace headers: %v", leg.kind, r.Header)
		}
		if r.Get("Authorization") != leg.key {
			t.Errorf("%s leg Authorization = %q, want the engine's key", leg.kind, r.Get("Authorization"))
		}
		if r.Get("X-Secret") != "" || r.Get("Cookie") != "" {
			t.Errorf("%s leg got client headers: %v", leg.kind, r.Header)
		}
	}
}
