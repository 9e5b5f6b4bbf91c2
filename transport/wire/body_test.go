package wire

import (
	"bytes"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/goccy/go-json"
)

// fixture reads one of vLLM's wire shapes from tests/fixtures/vllm.
func fixture(t testing.TB, name string) []byte {
	t.Helper()
	b, err := os.ReadFile(filepath.Join("..", "..", "tests", "fixtures", "vllm", name))
	if err != nil {
		t.Fatal(err)
	}
	return bytes.TrimSpace(b)
}

// nixlPrefillParams is what the NIXL connector asks a producer for (transport/kv).
var nixlPrefillParams = []byte(`{"do_remote_decode":true,"do_remote_prefill":false,"remote_engine_id":null,"remote_block_ids":null,"remote_host":null,"remote_port":null}`)

// The client request that vLLM's fixtures were derived from.
const fixtureClientBody = `{"model":"Qwen/Qwen3-0.6B","prompt":"Explain disaggregated prefill in one paragraph.","max_tokens":256,"min_tokens":16,"temperature":0.7,"top_p":0.95,"seed":7,"stream":true,"stream_options":{"include_usage":true}}`

func TestPrefillBodyMatchesVLLMFixtureByteForByte(t *testing.T) {
	b, err := ParseClientBody(EndpointCompletions, []byte(fixtureClientBody))
	if err != nil {
		t.Fatal(err)
	}
	got := b.AppendPrefillBody(nil, nixlPrefillParams)
	if want := fixture(t, "prefill-request.json"); !bytes.Equal(got, want) {
		t.Fatalf("prefill body\n got %s\nwant %s", got, want)
	}
}

func TestDecodeBodyMatchesVLLMFixtureByteForByte(t *testing.T) {
	b, err := ParseClientBody(EndpointCompletions, []byte(fixtureClientBody))
	if err != nil {
		t.Fatal(err)
	}
	desc := []byte(`{"do_remote_prefill":true,"do_remote_decode":false,"remote_block_ids":[0,1,2,3],"remote_engine_id":"c53ac287-36cd-4b52-811f-16de4e4bd3a5","remote_request_id":"cmpl-6f1c2d3e-0000-4000-8000-000000000002-0-1a2b3c4d","remote_host":"10.0.0.5","remote_port":5600,"tp_size":1}`)
	got := b.AppendDecodeBody(nil, desc)
	if want := fixture(t, "decode-request.json"); !bytes.Equal(got, want) {
		t.Fatalf("decode body\n got %s\nwant %s", got, want)
	}
}

func TestPrefillBodyRewrites(t *testing.T) {
	cases := []struct {
		name, in string
		check    func(t *testing.T, m map[string]json.RawMessage)
	}{
		{"chat with max_completion_tokens and min_completion_tokens",
			`{"model":"m","messages":[{"role":"user","content":"hi"}],"max_completion_tokens":50,"min_completion_tokens":3,"stream":true,"stream_options":{"include_usage":true}}`,
			func(t *testing.T, m map[string]json.RawMessage) {
				want := map[string]string{"max_tokens": "1", "max_completion_tokens": "1", "stream": "false"}
				for k, v := range want {
					if string(m[k]) != v {
						t.Errorf("%s = %s, want %s", k, m[k], v)
					}
				}
				for _, k := range []string{"min_completion_tokens", "stream_options"} {
					if _, ok := m[k]; ok {
						t.Errorf("%s not removed", k)
					}
				}
			}},
		{"no max_completion_tokens is not invented",
			`{"model":"m","prompt":"x"}`,
			func(t *testing.T, m map[string]json.RawMessage) {
				if _, ok := m["max_completion_tokens"]; ok {
					t.Error("max_completion_tokens added")
				}
				if string(m["max_tokens"]) != "1" || string(m["stream"]) != "false" {
					t.Errorf("max_tokens=%s stream=%s", m["max_tokens"], m["stream"])
				}
			}},
		{"client kv_transfer_params replaced, even when spelled with escapes or duplicated",
			`{"model":"m","prompt":"x","kv_transfer_params":{"remote_host":"evil"},"kv_transfer_param\u0073":{"remote_host":"evil2"}}`,
			func(t *testing.T, m map[string]json.RawMessage) {
				if string(m["kv_transfer_params"]) != string(nixlPrefillParams) {
					t.Errorf("kv_transfer_params = %s", m["kv_transfer_params"])
				}
			}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			ep := EndpointCompletions
			if strings.Contains(tc.in, "messages") {
				ep = EndpointChat
			}
			b, err := ParseClientBody(ep, []byte(tc.in))
			if err != nil {
				t.Fatal(err)
			}
			out := b.AppendPrefillBody(nil, nixlPrefillParams)
			if bytes.Contains(out, []byte("evil")) {
				t.Fatalf("client kv_transfer_params leaked: %s", out)
			}
			var m map[string]json.RawMessage
			if err := json.Unmarshal(out, &m); err != nil {
				t.Fatalf("output is not JSON: %v\n%s", err, out)
			}
			tc.check(t, m)
		})
	}
}

func TestDecodeBodyStripsEveryTransferParamWhenNoDescriptor(t *testing.T) {
	in := `{"model":"m","prompt":"x","kv_transfer_params":{"remote_host":"evil"},"kv_transfer_param\u0073":{"do_remote_prefill":true}}`
	b, err := ParseClientBody(EndpointCompletions, []byte(in))
	if err != nil {
		t.Fatal(err)
	}
	out := b.AppendDecodeBody(nil, nil)
	if bytes.Contains(out, []byte("kv_transfer_param")) {
		t.Fatalf("transfer params survived: %s", out)
	}
	if want := `{"model":"m","prompt":"x","stream":true,"stream_options":{"include_usage":true}}`; string(out) != want {
		t.Fatalf("got %s\nwant %s", out, want)
	}
}

func TestEmptyStreamOptionsMeanUsageLikeVLLM(t *testing.T) {
	b, err := ParseClientBody(EndpointCompletions, []byte(`{"model":"m","prompt":"x","stream":true,"stream_options":{}}`))
	if err != nil {
		t.Fatal(err)
	}
	if !b.IncludeUsage {
		t.Fatal("stream_options {} must include usage, as vLLM does")
	}
}

func TestDecodeBodyKeepsClientStreamOptions(t *testing.T) {
	in := `{"model":"m","prompt":"x","stream":true,"stream_options":{"continuous_usage_stats":true,"include_usage":false}}`
	b, err := ParseClientBody(EndpointCompletions, []byte(in))
	if err != nil {
		t.Fatal(err)
	}
	if b.IncludeUsage {
		t.Fatal("client did not ask for usage")
	}
	out := b.AppendDecodeBody(nil, nil)
	if want := `{"model":"m","prompt":"x","stream":true,"stream_options":{"continuous_usage_stats":true,"include_usage":true}}`; string(out) != want {
		t.Fatalf("got %s\nwant %s", out, want)
	}
}

func TestParseClientBodyRejections(t *testing.T) {
	cases := []struct {
		name, in, param string
		ep              Endpoint
	}{
		{"not json", `{"model":`, "", EndpointCompletions},
		{"not an object", `["model"]`, "", EndpointCompletions},
		{"no model", `{"prompt":"x"}`, "model", EndpointCompletions},
		{"model not a string", `{"model":3,"prompt":"x"}`, "model", EndpointCompletions},
		{"no prompt", `{"model":"m"}`, "prompt", EndpointCompletions},
		{"prompt is a number", `{"model":"m","prompt":3}`, "prompt", EndpointCompletions},
		{"no messages", `{"model":"m","prompt":"x"}`, "messages", EndpointChat},
		{"empty messages", `{"model":"m","messages":[ ]}`, "messages", EndpointChat},
		{"stream not bool", `{"model":"m","prompt":"x","stream":"yes"}`, "stream", EndpointCompletions},
		{"stream_options not object", `{"model":"m","prompt":"x","stream_options":true}`, "stream_options", EndpointCompletions},
		{"max_tokens zero", `{"model":"m","prompt":"x","max_tokens":0}`, "max_tokens", EndpointCompletions},
		{"max_tokens float", `{"model":"m","prompt":"x","max_tokens":1.5}`, "max_tokens", EndpointCompletions},
		{"n negative", `{"model":"m","prompt":"x","n":-1}`, "n", EndpointCompletions},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			_, err := ParseClientBody(tc.ep, []byte(tc.in))
			bre, ok := err.(*BadRequestError)
			if !ok {
				t.Fatalf("err = %v, want a BadRequestError", err)
			}
			if bre.Param != tc.param {
				t.Fatalf("param = %q, want %q (%s)", bre.Param, tc.param, bre.Message)
			}
		})
	}
}

func TestParseClientBodyReadsTheLastDuplicateLikeTheEngine(t *testing.T) {
	b, err := ParseClientBody(EndpointCompletions, []byte(`{"model":"a","prompt":"x","model":"b","stream":false,"stream":true}`))
	if err != nil {
		t.Fatal(err)
	}
	if b.Model != "b" || !b.Stream {
		t.Fatalf("model=%q stream=%v", b.Model, b.Stream)
	}
}

func FuzzRewriteObject(f *testing.F) {
	f.Add([]byte(fixtureClientBody))
	f.Add([]byte(`{"a":{"b":[1,"}",{"c":"\""}]},"kv_transfer_params":null}`))
	f.Add([]byte(`{}`))
	f.Fuzz(func(t *testing.T, data []byte) {
		fields, err := ScanObject(data, nil) // it refuses garbage, and must not panic on it
		if err != nil {
			return
		}
		out := RewriteObject(nil, data, fields, []Edit{{Key: "stream", Value: jsonTrue}, {Key: "kv_transfer_params"}})
		var m map[string]json.RawMessage
		if err := json.Unmarshal(out, &m); err != nil {
			t.Fatalf("rewrite of %s produced invalid JSON %s: %v", data, out, err)
		}
		if string(m["stream"]) != "true" {
			t.Fatalf("stream = %s in %s", m["stream"], out)
		}
		if _, ok := m["kv_transfer_params"]; ok {
			t.Fatalf("kv_transfer_params survived in %s", out)
		}
	})
}
