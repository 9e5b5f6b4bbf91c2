package tests

import (
	"bytes"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/narwhal-router/narwhal/bench/sim"
	"github.com/narwhal-router/narwhal/transport/telemetry"
)

// metricsTraffic drives requests that make most of the catalog report: successes, a retry, an
// engine fault, an unknown model and a streamed request.
func metricsTraffic(t *testing.T, h *harness) {
	t.Helper()
	expectDone(t, h.send("/v1/completions", completion("hi", true)))
	if r := h.send("/v1/chat/completions", chat("hi", false)); r.status != 200 {
		t.Fatalf("chat: %d %s", r.status, r.body)
	}
	h.inject("d0", "decode.status=500", 1)
	h.send("/v1/completions", completion("retry me", true))
	expectError(t, h.send("/v1/completions", `{"model":"nope","prompt":"x"}`), 404, "model_not_found", "")
}

// TestPrometheusScrapePassesPromtool runs `promtool check metrics` (Prometheus's own linter)
// on a real scrape: counters end in _total, durations are _seconds, no library-internal series.
func TestPrometheusScrapePassesPromtool(t *testing.T) {
	promtool, err := exec.LookPath("promtool")
	if err != nil {
		t.Skip("promtool is not installed (Debian: apt-get install prometheus; .ci/run does it): the scrape is not linted")
	}
	h := start(t, setup{prefill: 1, decode: 1, engine: sim.Options{Tokens: 3}, config: retries(2)})
	metricsTraffic(t, h)
	var scrape string
	eventually(t, 5*time.Second, func() bool {
		scrape = h.scrape()
		return strings.Contains(scrape, "narwhal_requests_total{") && strings.Contains(scrape, "narwhal_retries_total{")
	}, func() string { return "the scrape never showed the requests and retries:\n" + grep(scrape, "narwhal_") })

	for _, want := range []string{"narwhal_ttft_seconds_bucket{", "narwhal_total_seconds_bucket{", "narwhal_engine_faults_total{"} {
		if !strings.Contains(scrape, want) {
			t.Errorf("no %s series in the scrape:\n%s", want, grep(scrape, "narwhal_"))
		}
	}
	if strings.Contains(scrape, "tally") {
		t.Errorf("library-internal series in the scrape:\n%s", grep(scrape, "tally"))
	}
	cmd := exec.Command(promtool, "check", "metrics")
	cmd.Stdin = strings.NewReader(scrape)
	var out bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &out
	if err := cmd.Run(); err != nil {
		t.Fatalf("promtool check metrics: %v\n%s", err, out.String())
	}
}

// TestStatsdSendsOnlyCatalogMetrics checks that every statsd line is one of Narwhal's own
// metrics under its documented, stable name — nothing from the metrics library, no version in
// a name.
func TestStatsdSendsOnlyCatalogMetrics(t *testing.T) {
	sink := newStatsdSink(t)
	h := start(t, setup{prefill: 1, decode: 1, engine: sim.Options{Tokens: 3}, config: configs(retries(2), withStatsd(sink))})
	metricsTraffic(t, h)
	eventually(t, 5*time.Second, func() bool { return sink.sum("narwhal.retries.reason.engine_status") > 0 },
		func() string { return "no retry counted in statsd" })
	catalog := readmeCatalog(t)
	sink.mu.Lock()
	lines := append([]string(nil), sink.lines...)
	sink.mu.Unlock()
	for _, l := range lines {
		name, _, _ := strings.Cut(l, ":")
		base, _, _ := strings.Cut(strings.TrimPrefix(name, "narwhal."), ".")
		if !strings.HasPrefix(name, "narwhal.") || !catalog[base] || strings.Contains(name, "tally") {
			t.Errorf("statsd line %q is not a documented Narwhal metric", l)
		}
	}
	if len(lines) == 0 {
		t.Fatal("no statsd line")
	}
}

// readmeMetricRow is a row of the README's metric table: the catalog (statsd) name first.
var readmeMetricRow = regexp.MustCompile("(?m)^\\| `([a-z_]+)` \\| `(narwhal_[a-z_]+)` \\| (counter|timer|gauge|histogram) \\|")

// readmeCatalog returns the metric names the README documents, checking that each row's
// Prometheus name is the one Narwhal derives from it.
func readmeCatalog(t *testing.T) map[string]bool {
	t.Helper()
	b := readRepoFile(t, "README.md")
	out := map[string]bool{}
	for _, m := range readmeMetricRow.FindAllStringSubmatch(string(b), -1) {
		if want := telemetry.PrometheusName(m[1], m[3]); m[2] != want {
			t.Errorf("README: %s is exported to Prometheus as %s, not %s", m[1], want, m[2])
		}
		out[m[1]] = true
	}
	if len(out) < 20 {
		t.Fatalf("the README metric table lists only %d metrics", len(out))
	}
	return out
}

// readRepoFile reads a file relative to the repository root.
func readRepoFile(t *testing.T, name string) []byte {
	t.Helper()
	b, err := os.ReadFile(filepath.Join("..", name))
	if err != nil {
		t.Fatal(err)
	}
	return b
}
