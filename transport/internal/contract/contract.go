// Package contract loads the shared test vectors of testdata/contract, which the Go packages'
// contract tests and the Python client's tests (python/tests/test_contract.py) both run, so the
// two clients cannot drift. It is test support only.
package contract

import (
	"bytes"
	"encoding/json"
	"os"
	"path/filepath"
	"runtime"
	"testing"

	"github.com/narwhal-router/narwhal/transport/wire"
)

// root is the repository's top directory, found from this file's place in it.
var root = func() string {
	_, file, _, _ := runtime.Caller(0)
	return filepath.Join(filepath.Dir(file), "..", "..", "..")
}()

// RepoFile reads a file named relative to the repository root, trimmed of surrounding
// whitespace when trim is set.
func RepoFile(t testing.TB, rel string, trim bool) []byte {
	t.Helper()
	b, err := os.ReadFile(filepath.Join(root, filepath.FromSlash(rel)))
	if err != nil {
		t.Fatal(err)
	}
	if trim {
		b = bytes.TrimSpace(b)
	}
	return b
}

// Load decodes the vector file testdata/contract/name into v.
func Load(t testing.TB, name string, v any) {
	t.Helper()
	if err := json.Unmarshal(RepoFile(t, "testdata/contract/"+name, false), v); err != nil {
		t.Fatalf("%s: %v", name, err)
	}
}

// Endpoint maps a vector's endpoint name to the wire's.
func Endpoint(s string) wire.Endpoint {
	if s == "chat" {
		return wire.EndpointChat
	}
	return wire.EndpointCompletions
}

// KVOf returns the kv_transfer_params of a prefill response, byte for byte.
func KVOf(t testing.TB, body []byte) []byte {
	t.Helper()
	var r struct {
		KV json.RawMessage `json:"kv_transfer_params"`
	}
	if err := json.Unmarshal(body, &r); err != nil {
		t.Fatal(err)
	}
	return r.KV
}
