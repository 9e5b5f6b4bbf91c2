package config

import (
	"encoding/json"
	"os"
	"strings"
	"testing"
)

// TestContractEngineURLs runs the shared engine URL vectors (testdata/contract/engine_urls.json)
// through engines[].url's validation; python/tests/test_contract.py runs the same file through
// the Python client's EngineClient, so both refuse the same URLs with the same words.
func TestContractEngineURLs(t *testing.T) {
	b, err := os.ReadFile("../testdata/contract/engine_urls.json")
	if err != nil {
		t.Fatal(err)
	}
	var doc struct {
		Accepted []struct{ URL string }
		Refused  []struct{ URL, Error string }
	}
	if err := json.Unmarshal(b, &doc); err != nil {
		t.Fatal(err)
	}
	if len(doc.Accepted) == 0 || len(doc.Refused) == 0 {
		t.Fatalf("%d accepted and %d refused URLs", len(doc.Accepted), len(doc.Refused))
	}
	check := func(url string) error {
		c := Default()
		c.Engines = []Engine{{Name: "e", URL: url, Role: RoleBoth}}
		c.Engines[0].applyDefaults()
		return c.validate()
	}
	for _, v := range doc.Accepted {
		if err := check(v.URL); err != nil {
			t.Errorf("%q refused: %v", v.URL, err)
		}
	}
	for _, v := range doc.Refused {
		err := check(v.URL)
		if err == nil || !strings.Contains(err.Error(), "engines[0].url") || !strings.Contains(err.Error(), v.Error) {
			t.Errorf("%q: %v; want an engines[0].url error containing %q", v.URL, err, v.Error)
		}
	}
}
