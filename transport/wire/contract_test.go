package wire_test

// The leg body vectors of testdata/contract (bodies.json), run against transport/wire.
// python/tests/test_contract.py runs the same file against the Python client, so the two
// cannot drift. Descriptors are run in transport/kv, the fault table in transport/fault and
// the scripted engine answers in transport.

import (
	"bytes"
	"errors"
	"testing"

	"github.com/narwhal-router/narwhal/transport/internal/contract"
	"github.com/narwhal-router/narwhal/transport/kv"
	"github.com/narwhal-router/narwhal/transport/wire"
)

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
	contract.Load(t, "bodies.json", &doc)
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
			b, err := wire.ParseClientBody(contract.Endpoint(tc.Endpoint), []byte(tc.Client))
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
				want = contract.RepoFile(t, tc.WantFixture, true)
			}
			if !bytes.Equal(got, want) {
				t.Fatalf("%s body\n got %s\nwant %s", tc.Leg, got, want)
			}
		})
	}
	for _, tc := range doc.Rejections {
		t.Run("rejects "+tc.Name, func(t *testing.T) {
			_, err := wire.ParseClientBody(contract.Endpoint(tc.Endpoint), []byte(tc.Client))
			var bre *wire.BadRequestError
			if !errors.As(err, &bre) || bre.Param != tc.Param {
				t.Fatalf("err = %v, want a bad request naming %q", err, tc.Param)
			}
		})
	}
}
