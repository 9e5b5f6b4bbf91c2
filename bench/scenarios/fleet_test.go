package scenarios

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

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

// TestFleetReportsEveryPolicyInEveryMode runs the scenario on a tiny trace (12 requests over
// 3.3 s of trace time, 0.33 s replayed; conversations of two turns): a table per workload and
// mode with every policy and every request served, every rate measured, the plots written.
func TestFleetReportsEveryPolicyInEveryMode(t *testing.T) {
	if testing.Short() {
		t.Skip("starts 12 simulated fleets")
	}
	dir := t.TempDir()
	path := filepath.Join(dir, "trace.jsonl")
	writeConversations(t, path, 12)
	start := time.Now()
	sec, err := Fleet(harness.Env{Dir: dir, Trace: path, Quick: true})
	if err != nil {
		t.Fatal(err)
	}
	text := sec.Text()
	for _, w := range []string{"trace", "no sharing"} {
		for _, m := range fleetModes {
			if !strings.Contains(text, w+", "+m.Name+":") {
				t.Errorf("no table for %s, %s:\n%s", w, m.Name, text)
			}
			for _, p := range fleetPolicies {
				key := fmt.Sprintf("fleet_%s_%s_%s_tokens_per_s", slug(w), slug(m.Name), slug(p.Name[:3]))
				if v, ok := sec.Figures[key].(float64); !ok || v <= 0 {
					t.Errorf("%s = %v, want a rate", key, sec.Figures[key])
				}
			}
			plot := filepath.Join(dir, "ttft-"+slug(w)+"-"+slug(m.Name)+".png")
			if fi, err := os.Stat(plot); err != nil || fi.Size() == 0 {
				t.Errorf("plot %s: %v", plot, err)
			}
		}
	}
	for _, p := range fleetPolicies {
		if n := strings.Count(text, p.Name+" "); n != 2*len(fleetModes) {
			t.Errorf("%q has %d rows, want one per workload and mode:\n%s", p.Name, n, text)
		}
	}
	if n := strings.Count(text, " 12/12 "); n != 2*len(fleetModes)*len(fleetPolicies) {
		t.Errorf("%d rows with every request served, want %d:\n%s", n, 2*len(fleetModes)*len(fleetPolicies), text)
	}
	if n := strings.Count(text, "(c) ÷ (a): TTFT p99 "); n != 2*len(fleetModes) {
		t.Errorf("%d (c) ÷ (a) lines, want one per workload and mode:\n%s", n, text)
	}
	if !strings.Contains(text, fmt.Sprintf("closed loop: %d sessions", fleetSessions)) {
		t.Errorf("the closed loop's mode is not described:\n%s", text)
	}
	t.Logf("%v", time.Since(start))
}

// writeConversations writes a tiny trace of n requests 0.3 s apart in which requests 2k and
// 2k+1 are two turns of conversation k: the second repeats the first's 3 blocks (the first
// shared by every request) and adds one.
func writeConversations(t *testing.T, path string, n int) {
	t.Helper()
	var b strings.Builder
	for i := range n {
		conv := 100 * (i / 2)
		ids := []int{0, conv + 1, conv + 2}
		if i%2 == 1 {
			ids = append(ids, conv+3)
		}
		fmt.Fprintf(&b, `{"timestamp":%d,"input_length":%d,"output_length":40,"hash_ids":%s}`+"\n",
			i*300, 512*len(ids), strings.ReplaceAll(fmt.Sprint(ids), " ", ","))
	}
	if err := os.WriteFile(path, []byte(b.String()), 0o644); err != nil {
		t.Fatal(err)
	}
}
