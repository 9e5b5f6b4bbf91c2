package kv

import (
	"bytes"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/goccy/go-json"

	"github.com/narwhal-router/narwhal/transport/wire"
)

var (
	producerSide = Side{Engine: "p0", Connector: "nixl", TransferModes: []string{"pull"}}
	consumerSide = Side{Engine: "d0", Connector: "nixl", TransferModes: []string{"pull"}}
)

func pair(mut ...func(*Pair)) Pair {
	p := Pair{Producer: producerSide, Consumer: consumerSide, Endpoint: wire.EndpointCompletions}
	for _, m := range mut {
		m(&p)
	}
	return p
}

// fixture reads one of vLLM's wire shapes from tests/fixtures/vllm.
func fixture(t testing.TB, name string) []byte {
	t.Helper()
	b, err := os.ReadFile(filepath.Join("..", "..", "tests", "fixtures", "vllm", name))
	if err != nil {
		t.Fatal(err)
	}
	return bytes.TrimSpace(b)
}

// descriptorOf pulls kv_transfer_params out of a prefill response fixture.
func descriptorOf(t testing.TB, name string) []byte {
	t.Helper()
	var r struct {
		KV json.RawMessage `json:"kv_transfer_params"`
	}
	if err := json.Unmarshal(fixture(t, name), &r); err != nil {
		t.Fatal(err)
	}
	return r.KV
}

func validate(t *testing.T, raw []byte, ep wire.Endpoint, p Pair) *Rejection {
	t.Helper()
	d, rej := ParseDescriptor(raw, ep)
	if rej != nil {
		return rej
	}
	return ValidateDescriptor(nixlConnector{}, d, p)
}

func TestAcceptedDescriptorShapes(t *testing.T) {
	cases := []struct {
		name    string
		fixture string
		ep      wire.Endpoint
		pair    Pair
	}{
		{"v1 flat blocks without remote_request_id", "prefill-response-v1.json", wire.EndpointCompletions, pair()},
		{"v2 with remote_request_id", "prefill-response-v2.json", wire.EndpointCompletions, pair()},
		{"newest grouped with dcp_size, pp_size and transfer_mode", "prefill-response-newest.json", wire.EndpointChat,
			pair(func(p *Pair) { p.Endpoint = wire.EndpointChat })},
		{"pinned identity with a data-parallel suffix", "prefill-response-newest.json", wire.EndpointChat,
			pair(func(p *Pair) {
				p.Endpoint = wire.EndpointChat
				p.Producer.EngineID = "c53ac287-36cd-4b52-811f-16de4e4bd3a5"
			})},
		{"pinned identity and endpoint", "prefill-response-v2.json", wire.EndpointCompletions,
			pair(func(p *Pair) {
				p.Producer.EngineID = "c53ac287-36cd-4b52-811f-16de4e4bd3a5"
				p.Producer.Endpoint = "10.0.0.5:5600"
			})},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			if rej := validate(t, descriptorOf(t, tc.fixture), tc.ep, tc.pair); rej != nil {
				t.Fatalf("rejected: %v", rej)
			}
		})
	}
}

const goodDesc = `{"do_remote_prefill":true,"do_remote_decode":false,"remote_block_ids":[0,1,2],"remote_engine_id":"e1","remote_request_id":"cmpl-x-0-1a2b3c4d","remote_host":"10.0.0.5","remote_port":5600,"tp_size":1}`

// with replaces (or, with value "", removes) one member of goodDesc.
func with(key, value string) string {
	d, _ := ParseDescriptor([]byte(goodDesc), wire.EndpointCompletions)
	var e []wire.Edit
	if value == "" {
		e = []wire.Edit{{Key: key}}
	} else {
		e = []wire.Edit{{Key: key, Value: []byte(value)}}
	}
	return string(wire.RewriteObject(nil, d.raw, d.fields, e))
}

func TestDescriptorRejections(t *testing.T) {
	cases := []struct {
		name   string
		desc   string
		ep     wire.Endpoint
		pair   Pair
		reason string
		detail string
	}{
		{"engine id absent", with("remote_engine_id", ""), wire.EndpointCompletions, pair(), ReasonMissingEngineIdentity, "remote_engine_id"},
		{"engine id empty", with("remote_engine_id", `""`), wire.EndpointCompletions, pair(), ReasonMissingEngineIdentity, "empty"},
		{"engine id null", with("remote_engine_id", `null`), wire.EndpointCompletions, pair(), ReasonMissingEngineIdentity, "remote_engine_id"},
		{"engine id not the pinned one", goodDesc, wire.EndpointCompletions, pair(func(p *Pair) { p.Producer.EngineID = "p0-pinned" }), ReasonMissingEngineIdentity, "pinned"},
		{"engine id with a bad dp suffix", with("remote_engine_id", `"p0-pinned_dpx"`), wire.EndpointCompletions, pair(func(p *Pair) { p.Producer.EngineID = "p0-pinned" }), ReasonMissingEngineIdentity, "pinned"},
		{"blocks absent", with("remote_block_ids", ""), wire.EndpointCompletions, pair(), ReasonMalformedBlockIDs, "absent"},
		{"blocks null", with("remote_block_ids", "null"), wire.EndpointCompletions, pair(), ReasonMalformedBlockIDs, "array"},
		{"blocks empty", with("remote_block_ids", "[]"), wire.EndpointCompletions, pair(), ReasonMalformedBlockIDs, "empty"},
		{"blocks with a float", with("remote_block_ids", "[0,1.5]"), wire.EndpointCompletions, pair(), ReasonMalformedBlockIDs, "1.5"},
		{"blocks with 1.0", with("remote_block_ids", "[1.0]"), wire.EndpointCompletions, pair(), ReasonMalformedBlockIDs, "1.0"},
		{"blocks with an exponent", with("remote_block_ids", "[1e3]"), wire.EndpointCompletions, pair(), ReasonMalformedBlockIDs, "1e3"},
		{"blocks with a string", with("remote_block_ids", `[0,"1"]`), wire.EndpointCompletions, pair(), ReasonMalformedBlockIDs, `"1"`},
		{"blocks with null", with("remote_block_ids", `[0,null]`), wire.EndpointCompletions, pair(), ReasonMalformedBlockIDs, "null"},
		{"blocks negative", with("remote_block_ids", `[0,-2]`), wire.EndpointCompletions, pair(), ReasonMalformedBlockIDs, "-2"},
		{"blocks nested too deep", with("remote_block_ids", `[[[0]]]`), wire.EndpointCompletions, pair(), ReasonMalformedBlockIDs, "[0]"},
		{"blocks mixing ids and groups", with("remote_block_ids", `[[0],1]`), wire.EndpointCompletions, pair(), ReasonMalformedBlockIDs, "mixes"},
		{"blocks with an empty group", with("remote_block_ids", `[[0],[]]`), wire.EndpointCompletions, pair(), ReasonMalformedBlockIDs, "empty"},
		{"blocks an object", with("remote_block_ids", `{"0":1}`), wire.EndpointCompletions, pair(), ReasonMalformedBlockIDs, "array"},
		{"blocks too many", with("remote_block_ids", "["+strings.Repeat("1,", maxBlockIDs)+"1]"), wire.EndpointCompletions, pair(), ReasonMalformedBlockIDs, "more than"},
		{"mooncake fields on a nixl pair", with("transfer_id", `"t-1"`), wire.EndpointCompletions, pair(), ReasonConnectorMismatch, "transfer_id"},
		{"bootstrap address on a nixl pair", with("remote_bootstrap_addr", `"10.0.0.5:8998"`), wire.EndpointCompletions, pair(), ReasonConnectorMismatch, "remote_bootstrap_addr"},
		{"pair with different connectors", goodDesc, wire.EndpointCompletions, pair(func(p *Pair) { p.Consumer.Connector = "mooncake" }), ReasonConnectorMismatch, "mooncake"},
		{"transfer mode the consumer does not speak", with("transfer_mode", `"push"`), wire.EndpointCompletions, pair(), ReasonConnectorMismatch, "transfer_mode"},
		{"do_remote_prefill false", with("do_remote_prefill", "false"), wire.EndpointCompletions, pair(), ReasonConnectorMismatch, "do_remote_prefill"},
		{"not an object", `[1,2]`, wire.EndpointCompletions, pair(), ReasonConnectorMismatch, "object"},
		{"kv endpoint not the pinned one", goodDesc, wire.EndpointCompletions, pair(func(p *Pair) { p.Producer.Endpoint = "10.0.0.5:5601" }), ReasonEndpointMismatch, "10.0.0.5:5600"},
		{"kv port missing", with("remote_port", ""), wire.EndpointCompletions, pair(), ReasonEndpointMismatch, "remote_port"},
		{"kv port a string", with("remote_port", `"5600"`), wire.EndpointCompletions, pair(), ReasonEndpointMismatch, "remote_port"},
		{"kv port out of range", with("remote_port", `70000`), wire.EndpointCompletions, pair(), ReasonEndpointMismatch, "remote_port"},
		{"chat prefill feeding a completions decode", goodDesc, wire.EndpointChat, pair(), ReasonEndpointMismatch, "chat"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			rej := validate(t, []byte(tc.desc), tc.ep, tc.pair)
			if rej == nil {
				t.Fatal("accepted")
			}
			if rej.Reason != tc.reason || !strings.Contains(rej.Detail, tc.detail) {
				t.Fatalf("rejection = %v, want reason %s with %q in the detail", rej, tc.reason, tc.detail)
			}
		})
	}
}

func TestDescriptorWithUnknownFieldsIsForwardedVerbatim(t *testing.T) {
	raw := []byte(`{"zz_first":{"nested":[1,{"a":"b"}]},"do_remote_prefill":true,"remote_block_ids":[[4,5],[9]],"remote_engine_id":"e","remote_host":"h","remote_port":1,"future_flag":true,"weird \"key\"":null,"do_remote_decode":false,"n":1.25e3}`)
	d, rej := ParseDescriptor(raw, wire.EndpointCompletions)
	if rej != nil {
		t.Fatal(rej)
	}
	if rej := ValidateDescriptor(nixlConnector{}, d, pair()); rej != nil {
		t.Fatal(rej)
	}
	b, err := wire.ParseClientBody(wire.EndpointCompletions, []byte(`{"model":"m","prompt":"p"}`))
	if err != nil {
		t.Fatal(err)
	}
	body := b.AppendDecodeBody(nil, d.Raw())
	if !bytes.Contains(body, raw) {
		t.Fatalf("descriptor not forwarded byte for byte:\n%s", body)
	}
}

func FuzzValidateDescriptor(f *testing.F) {
	for _, s := range []string{goodDesc, `{"remote_block_ids":[[1],[2,3]]}`, `{"remote_block_ids":[1,`, `[]`, `{"a":"\u00"}`} {
		f.Add([]byte(s), uint8(0))
	}
	f.Fuzz(func(t *testing.T, raw []byte, flags uint8) {
		p := pair()
		if flags&1 != 0 {
			p.Producer.EngineID = "e1"
		}
		if flags&2 != 0 {
			p.Producer.Endpoint = "10.0.0.5:5600"
		}
		// Validation must never panic, valid JSON or not, and must never accept what the
		// consumer could not use.
		_ = checkBlockIDs(raw)
		d, rej := ParseDescriptor(raw, wire.EndpointCompletions)
		if rej != nil {
			return
		}
		if !json.Valid(raw) {
			t.Fatalf("indexed a descriptor that is not JSON: %q", raw)
		}
		if ValidateDescriptor(nixlConnector{}, d, p) != nil {
			return
		}
		var m map[string]any
		if err := json.Unmarshal(raw, &m); err != nil {
			t.Fatalf("accepted a descriptor that is not an object: %s", raw)
		}
		if id, _ := m["remote_engine_id"].(string); id == "" {
			t.Fatalf("accepted without an engine identity: %s", raw)
		}
		if _, ok := m["remote_block_ids"].([]any); !ok {
			t.Fatalf("accepted without block ids: %s", raw)
		}
	})
}

// BenchmarkValidateDescriptor is the per-attempt handoff check: index the producer's
// descriptor and validate it for the pair (the newest grouped shape, identity pinned).
func BenchmarkValidateDescriptor(b *testing.B) {
	raw := descriptorOf(b, "prefill-response-newest.json")
	p := pair(func(p *Pair) {
		p.Endpoint = wire.EndpointChat
		p.Producer.EngineID = "c53ac287-36cd-4b52-811f-16de4e4bd3a5"
	})
	b.ReportAllocs()
	for i := 0; i < b.N; i++ {
		d, rej := ParseDescriptor(raw, wire.EndpointChat)
		if rej != nil {
			b.Fatal(rej)
		}
		if rej := ValidateDescriptor(nixlConnector{}, d, p); rej != nil {
			b.Fatal(rej)
		}
	}
}

// A member without escapes is read in place; one with escapes is still unquoted, and either
// way the value is the JSON string's.
func TestDescriptorStringMembers(t *testing.T) {
	raw := []byte(`{"a":"plain","b":"e\u0031\"x","c":"","d":5,"e":"caf\u00e9 ü"}`)
	d, rej := ParseDescriptor(raw, wire.EndpointCompletions)
	if rej != nil {
		t.Fatal(rej)
	}
	for _, tc := range []struct {
		key, want string
		ok        bool
	}{{"a", "plain", true}, {"b", `e1"x`, true}, {"c", "", true}, {"d", "", false}, {"e", "café ü", true}, {"missing", "", false}} {
		got, ok := d.stringView(tc.key)
		copied, cok := d.StringMember(tc.key)
		if got != tc.want || ok != tc.ok || copied != got || cok != ok {
			t.Errorf("%s: view %q %v, copy %q %v; want %q %v", tc.key, got, ok, copied, cok, tc.want, tc.ok)
		}
	}
}

// Validating a NIXL descriptor that passes allocates nothing (an allocation budget, issue #17:
// it runs once per disaggregated request; it was 4, the string members and the endpoint).
func TestValidateDescriptorAllocations(t *testing.T) {
	raw := descriptorOf(t, "prefill-response-v2.json")
	p := pair(func(p *Pair) {
		p.Producer.EngineID = "c53ac287-36cd-4b52-811f-16de4e4bd3a5"
		p.Producer.Endpoint = "10.0.0.5:5600"
	})
	d, rej := ParseDescriptor(raw, wire.EndpointCompletions)
	if rej != nil {
		t.Fatal(rej)
	}
	n := testing.AllocsPerRun(100, func() {
		if rej := ValidateDescriptor(nixlConnector{}, d, p); rej != nil {
			t.Fatal(rej)
		}
	})
	if n > 0 {
		t.Fatalf("%.0f allocations per validation, want none", n)
	}
	t.Logf("%.0f allocations per validation", n)
}
