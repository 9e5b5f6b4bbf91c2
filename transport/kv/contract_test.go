package kv_test

// The descriptor vectors of testdata/contract, run against transport/kv.
// python/tests/test_contract.py runs the same files against the Python client
// (narwhal.engines), so the two cannot drift. The leg body rewrites are run in
// transport/wire, the fault table in transport/fault and the scripted engine answers in
// transport.

import (
	"bytes"
	"encoding/json"
	"strings"
	"testing"

	"github.com/narwhal-router/narwhal/transport/internal/contract"
	"github.com/narwhal-router/narwhal/transport/kv"
)

type contractSide struct {
	Engine    string `json:"engine"`
	Connector string `json:"connector"`
	EngineID  string `json:"engine_id"`
	Endpoint  string `json:"endpoint"`
	// The KV endpoint policy's inputs (a case without a host: no same-host check).
	Host             string         `json:"host"`
	AllowedEndpoints []string       `json:"allowed_endpoints"`
	AllowedPorts     []kv.PortRange `json:"allowed_ports"`
	ReservedPorts    []int          `json:"reserved_ports"`
	TransferModes    []string       `json:"transfer_modes"`
}

func (s contractSide) with(t *testing.T, override json.RawMessage) kv.Side {
	t.Helper()
	if override != nil {
		if err := json.Unmarshal(override, &s); err != nil {
			t.Fatal(err)
		}
	}
	return kv.Side(s)
}

func TestContractDescriptors(t *testing.T) {
	var doc struct {
		Producer, Consumer contractSide
		Cases              []struct {
			Name, Descriptor, Fixture string
			BlockIDsRepeat            int `json:"block_ids_repeat"`
			Endpoint                  string
			DecodeEndpoint            string `json:"decode_endpoint"`
			Producer, Consumer        json.RawMessage
			Want                      *struct {
				Reason         string
				DetailContains string `json:"detail_contains"`
			}
		}
	}
	contract.Load(t, "descriptors.json", &doc)
	if len(doc.Cases) < 40 {
		t.Fatalf("only %d descriptor cases", len(doc.Cases))
	}
	connectors := kv.Builtin()
	for _, tc := range doc.Cases {
		t.Run(tc.Name, func(t *testing.T) {
			raw := []byte(tc.Descriptor)
			if tc.Fixture != "" {
				raw = contract.KVOf(t, contract.RepoFile(t, tc.Fixture, true))
			}
			if tc.BlockIDsRepeat > 0 {
				blocks := "[" + strings.Repeat("1,", tc.BlockIDsRepeat-1) + "1]"
				raw = bytes.Replace(raw, []byte(`"remote_block_ids":[0,1,2]`), []byte(`"remote_block_ids":`+blocks), 1)
			}
			decodeEP := tc.DecodeEndpoint
			if decodeEP == "" {
				decodeEP = tc.Endpoint
			}
			pair := kv.Pair{Producer: doc.Producer.with(t, tc.Producer), Consumer: doc.Consumer.with(t, tc.Consumer), Endpoint: contract.Endpoint(decodeEP)}
			// The descriptor is checked by the producer's connector, as EngineClient.Decode does.
			c, err := connectors.Lookup(pair.Producer.Connector)
			if err != nil {
				t.Fatal(err)
			}
			d, rej := kv.ParseDescriptor(raw, contract.Endpoint(tc.Endpoint))
			if rej == nil {
				rej = kv.ValidateDescriptor(c, d, pair)
			}
			switch {
			case tc.Want == nil && rej != nil:
				t.Fatalf("rejected: %v", rej)
			case tc.Want == nil:
				if !bytes.Equal(d.Raw(), raw) {
					t.Fatalf("descriptor changed: %s", d.Raw())
				}
			case rej == nil:
				t.Fatal("accepted")
			case rej.Reason != tc.Want.Reason || !strings.Contains(rej.Detail, tc.Want.DetailContains):
				t.Fatalf("rejection = %v, want reason %s with %q in the detail", rej, tc.Want.Reason, tc.Want.DetailContains)
			}
		})
	}
}
