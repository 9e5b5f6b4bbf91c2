package scenarios

import (
	"path/filepath"
	"strings"
	"testing"

	"github.com/narwhal-router/narwhal/bench/harness"
)

func TestFleetSkipsClearlyWithoutTheTrace(t *testing.T) {
	missing := filepath.Join(t.TempDir(), "no-such-trace.jsonl")
	sec, err := Fleet(harness.Env{Dir: t.TempDir(), Trace: missing})
	if err != nil {
		t.Fatal(err)
	}
	if text := sec.Text(); !strings.Contains(text, "SKIPPED") || !strings.Contains(text, missing) {
		t.Fatalf("the skip does not say what is missing:\n%s", text)
	}
}
