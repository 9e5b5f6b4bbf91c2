package scenarios

import (
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// The nodes scenario on a tiny trace at one rate: every arm runs (three nodes form their
// cluster), serves every request, and reports its prefix hit rate and goodput.
func TestNodesRunsTiny(t *testing.T) {
	if testing.Short() {
		t.Skip("starts eight routers and four fleets")
	}
	env := processEnv(t)
	env.Trace = filepath.Join(env.Dir, "trace.jsonl")
	writeConversations(t, env.Trace, 8)
	sec, err := runNodes(env, []float64{4}, 2*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	text := sec.Text()
	for _, a := range nodesArms {
		if !strings.Contains(text, a.name) {
			t.Errorf("no row for %s:\n%s", a.name, text)
		}
		if _, ok := sec.Figures[a.key+"_goodput_rps"]; !ok {
			t.Errorf("no goodput for %s:\n%s", a.name, text)
		}
		hit, _ := sec.Figures[a.key+"_mean_prefix_hit_pct"].(float64)
		if hit <= 0 {
			t.Errorf("%s: no prefix hit although every second request repeats its conversation's first:\n%s", a.name, text)
		}
		if n := sec.Figures[a.key+"_failed"]; n != 0 {
			t.Errorf("%s: %v requests failed or were cut off:\n%s", a.name, n, text)
		}
	}
}
