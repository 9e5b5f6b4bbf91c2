package wire_test

// The leg body vectors of testdata/contract (bodies.json), run against transport/wire.
// python/tests/test_contract.py runs the same file against the Python client, so the two
// cannot drift. Descriptors are run in transport/kv, the fault table in transport/fault and
// the scripted engine answers in transport.

import (
	"bytes"
	"encoding/json"
	"errors"
	"os"
	"path/filepath"
	"testing"

	"github.com/narwhal-router/narwhal/transport/kv"
	"github.com/narwhal-router/narwhal/transport/wire"
)

// repoFile reads a file named relative to the repository root (this package is two levels
// down), trimmed of surrounding whitespace when trim is set.
func repoFile(t *testing.T, rel string, trim bool) []byte {
	t.Helper()
	b, err := os.ReadFile(filepath.Join("..", "..", filepath.FromSlash(rel)))
	if err != nil {
		t.Fatal(err)
	}
	if trim {
		b = bytes.TrimSpace(b)
	}
	return b
}

func loadContract(t *testing.T, name string, v any) {
	t.Helper()
	if err := json.Unmarshal(repoFile(t, "testdata/contract/"+name, false), v); err != nil {
		t.Fatalf("%s: %v", name, err)
	}
}

func contractEndpoint(s string) wire.Endpoint {
	if s == "chat" {
		return wire.EndpointChat
	}
	return wire.EndpointCompletions
}

func TestContractBodies(t *testing.T) {
	var doc struct {
		PrefillParams string `json:"prefill_params"`
		Cases         []struct {
			Name, Endpoint, Client, Leg string
			KV                          *string
			Want                        string
			WantFixture                 string `json:"want_fixture"`
		}
		Rejections []struct{ Name, Endpoint, Client, Param string }
	}
	loadContract(t, "bodies.json", &doc)
	if len(doc.Cases) == 0 || len(doc.Rejections) == 0 {
		t.Fatalf("bodies.json has %d cases and %d rejections", len(doc.Cases), len(doc.Rejections))
	}
	nixl, err := kv.Builtin().Lookup("nixl")
	if err != nil {
		t.Fatal(err)
	}
	prefillParams := nixl.Plan(kv.Attempt{BackendRequestID: "contract-1"}).Prefill
	if string(prefillParams) != doc.PrefillParams {
		t.Fatalf("nixl prefill params = %s, vectors say %s", prefillParams, doc.PrefillParams)
	}
	for _, tc := range doc.Cases {
		t.Run(tc.Name, func(t *testing.T) {
			b, err := wire.ParseClientBody(contractEndpoint(tc.Endpoint), []byte(tc.Client))
			if err != nil {
				t.Fatal(err)
			}
			var got []byte
			if tc.Leg == "prefill" {
				got = b.AppendPrefillBody(nil, prefillParams)
			} else {
				var params []byte
				if tc.KV != nil {
					params = []byte(*tc.KV)
				}
				got = b.AppendDecodeBody(nil, params)
			}
			want := []byte(tc.Want)
			if tc.WantFixture != "" {
				want = repoFile(t, tc.WantFixture, true)
			}
			if !bytes.Equal(got, want) {
				t.Fatalf("%s body\n got %s\nwant %s", tc.Leg, got, want)
			}
		})
	}
	for _, tc := range doc.Rejections {
		t.Run("rejects "+tc.Name, func(t *testing.T) {
			_, err := wire.ParseClientBody(contractEndpoint(tc.Endpoint), []byte(tc.Client))
			var bre *wire.BadRequestError
			if !errors.As(err, &bre) || bre.Param != tc.Param {
				t.Fatalf("err = %v, want a bad request naming %q", err, tc.Param)
			}
		})
	}
}
