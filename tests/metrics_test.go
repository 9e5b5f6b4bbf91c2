package tests

import (
	"bufio"
	"bytes"
	"fmt"
	"io"
	"net"
	"net/http"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/narwhal-router/narwhal/bench/sim"
	"github.com/narwhal-router/narwhal/config"
)

// statsdSink is a statsd daemon stand-in: it keeps every line Narwhal sends over UDP.
type statsdSink struct {
	conn  *net.UDPConn
	mu    sync.Mutex
	lines []string
	done  chan struct{}
}

func newStatsdSink(t *testing.T) *statsdSink {
	conn, err := net.ListenUDP("udp", &net.UDPAddr{IP: net.IPv4(127, 0, 0, 1)})
	if err != nil {
		t.Fatal(err)
	}
	s := &statsdSink{conn: conn, done: make(chan struct{})}
	go func() {
		defer close(s.done)
		buf := make([]byte, 65536)
		for {
			n, err := conn.Read(buf)
			if err != nil {
				return
			}
			s.mu.Lock()
			for _, l := range strings.Split(strings.TrimSpace(string(buf[:n])), "\n") {
				if l != "" {
					s.lines = append(s.lines, l)
				}
			}
			s.mu.Unlock()
		}
	}()
	t.Cleanup(func() { conn.Close(); <-s.done })
	return s
}

func (s *statsdSink) addr() string { return s.conn.LocalAddr().String() }

// values returns every value sent for name with the given statsd type (c, ms, g).
func (s *statsdSink) values(name, typ string) []float64 {
	s.mu.Lock()
	defer s.mu.Unlock()
	var out []float64
	for _, l := range s.lines {
		n, rest, ok := strings.Cut(l, ":")
		if !ok || n != name {
			continue
		}
		v, t, _ := strings.Cut(rest, "|")
		if t != typ {
			continue
		}
		f, err := strconv.ParseFloat(v, 64)
		if err == nil {
			out = append(out, f)
		}
	}
	return out
}

func (s *statsdSink) sum(name string) float64 {
	total := 0.0
	for _, v := range s.values(name, "c") {
		total += v
	}
	return total
}

func withStatsd(sink *statsdSink) func(*config.Config) {
	return func(c *config.Config) {
		c.Metrics.Statsd = &config.Statsd{Address: sink.addr(), Prefix: "narwhal", FlushIntervalS: 0.05}
	}
}

// scrape returns the Prometheus exposition of the admin listener.
func (h *harness) scrape() string {
	h.t.Helper()
	code, body := h.adminDo("GET", "/metrics")
	if code != 200 {
		h.t.Fatalf("GET /metrics: %d", code)
	}
	return string(body)
}

// promValue finds the sample `name{labels}` (labels in the exposition's order) in a scrape.
func promValue(t *testing.T, scrape, series string) float64 {
	t.Helper()
	re := regexp.MustCompile(`(?m)^` + regexp.QuoteMeta(series) + ` ([0-9.e+-]+)$`)
	m := re.FindStringSubmatch(scrape)
	if m == nil {
		t.Fatalf("series %s not in the scrape", series)
	}
	v, _ := strconv.ParseFloat(m[1], 64)
	return v
}

func within(t *testing.T, what string, got, lo, hi float64) {
	t.Helper()
	if got < lo || got > hi {
		t.Errorf("%s = %.1f, want within [%.0f, %.0f]", what, got, lo, hi)
	}
}

func TestMetricsReportTheMeasurementContract(t *testing.T) {
	sink := newStatsdSink(t)
	const ttft, decodeTTFT = 100.0, 100.0 // ms, as simulated
	h := start(t, setup{prefill: 1, decode: 1, engine: sim.Options{TTFT: 100 * time.Millisecond, ITL: 5 * time.Millisecond, Tokens: 4},
		config: withStatsd(sink)})
	const n = 4
	for i := 0; i < n; i++ {
		resp, body := h.post("/v1/completions", `{"model":"sim-model","prompt":"a b c","stream":true}`)
		if resp.StatusCode != 200 {
			t.Fatalf("status %d: %s", resp.StatusCode, body)
		}
		st := resp.Header.Get("Server-Timing")
		var ttftMs, fbMs float64
		if _, err := fmt.Sscanf(st, "ttft;dur=%f, first_byte;dur=%f", &ttftMs, &fbMs); err != nil {
			t.Fatalf("Server-Timing %q: %v", st, err)
		}
		within(t, "Server-Timing ttft", ttftMs, ttft, ttft+150)
		within(t, "Server-Timing first_byte", fbMs, ttft+decodeTTFT, ttft+decodeTTFT+150)
	}

	const ok = "narwhal.requests.endpoint.completions.model.sim-model.outcome.success.status.200"
	eventually(t, 3*time.Second, func() bool { return sink.sum(ok) == n }, func() string {
		return fmt.Sprintf("statsd %s = %v, want %d", ok, sink.sum(ok), n)
	})
	ttfts := sink.values("narwhal.ttft_s.endpoint.completions.model.sim-model", "ms")
	fbs := sink.values("narwhal.first_byte_s.endpoint.completions.model.sim-model", "ms")
	if len(ttfts) != n || len(fbs) != n {
		t.Fatalf("statsd timers: %d ttft, %d first_byte samples, want %d", len(ttfts), len(fbs), n)
	}
	for i := range ttfts {
		within(t, "statsd ttft_s", ttfts[i], ttft, ttft+150)
		within(t, "statsd first_byte_s", fbs[i], ttft+decodeTTFT, ttft+decodeTTFT+150)
	}
	if got := sink.sum("narwhal.relayed_tokens.endpoint.completions"); got != n*4 {
		t.Errorf("relayed_tokens = %v, want %d", got, n*4)
	}
	if got := sink.sum("narwhal.output_tokens.endpoint.completions.model.sim-model"); got != n*4 {
		t.Errorf("output_tokens = %v, want %d", got, n*4)
	}
	// The prompt tokens are the engine's usage, as the access log has them too.
	prompt := num(h.accessLines()[0]["prompt_tokens"])
	if got := sink.sum("narwhal.prompt_tokens.endpoint.completions.model.sim-model"); prompt <= 0 || got != n*prompt {
		t.Errorf("prompt_tokens = %v, want %d × the access log's %v", got, n, prompt)
	}
	if len(sink.values("narwhal.handoff_age_s.endpoint.completions", "ms")) != n {
		t.Error("no handoff_age_s per request")
	}

	var scrape string
	eventually(t, 3*time.Second, func() bool {
		scrape = h.scrape()
		return strings.Contains(scrape, `narwhal_requests_total{endpoint="completions",model="sim-model",outcome="success",status="200"} 4`)
	}, func() string {
		return "Prometheus requests counter never reached 4:\n" + grep(scrape, "narwhal_requests_total")
	})
	count := promValue(t, scrape, `narwhal_ttft_seconds_count{endpoint="completions",model="sim-model"}`)
	sum := promValue(t, scrape, `narwhal_ttft_seconds_sum{endpoint="completions",model="sim-model"}`)
	if count != n {
		t.Fatalf("ttft_s count %v", count)
	}
	within(t, "Prometheus mean ttft_s (ms)", sum/count*1000, ttft, ttft+150)
	fbMean := promValue(t, scrape, `narwhal_first_byte_seconds_sum{endpoint="completions",model="sim-model"}`) / n * 1000
	within(t, "Prometheus mean first_byte_s (ms)", fbMean, ttft+decodeTTFT, ttft+decodeTTFT+150)
}

func TestRetriedRequestTimingsIncludeTheFailedAttempt(t *testing.T) {
	sink := newStatsdSink(t)
	h := start(t, setup{prefill: 1, decode: 1, engine: sim.Options{TTFT: 50 * time.Millisecond, Tokens: 2}, config: func(c *config.Config) {
		withStatsd(sink)(c)
		c.Recovery.MaxAttempts = 2
		c.Engine.FirstTokenTimeoutS = 0.3
	}})
	h.fleet.Engine("d0").InjectFault("decode.hang_first_token", 1)
	resp, body := h.post("/v1/completions", `{"model":"sim-model","prompt":"x","stream":true}`)
	if resp.StatusCode != 200 {
		t.Fatalf("status %d: %s", resp.StatusCode, body)
	}
	// attempt 1: prefill 50 ms + 300 ms first-token timeout; attempt 2: prefill 50 ms, token 50 ms
	var ttftMs, fbMs float64
	fmt.Sscanf(resp.Header.Get("Server-Timing"), "ttft;dur=%f, first_byte;dur=%f", &ttftMs, &fbMs)
	within(t, "ttft of a retried request", ttftMs, 400, 600)
	within(t, "first_byte of a retried request", fbMs, 450, 650)
	eventually(t, 3*time.Second, func() bool { return len(sink.values("narwhal.ttft_s.endpoint.completions.model.sim-model", "ms")) == 1 },
		func() string { return "no ttft sample" })
	within(t, "statsd ttft of a retried request", sink.values("narwhal.ttft_s.endpoint.completions.model.sim-model", "ms")[0], 400, 600)
	eventually(t, 3*time.Second, func() bool { return sink.sum("narwhal.attempts.endpoint.completions.model.sim-model") == 2 },
		func() string {
			return fmt.Sprintf("attempts = %v, want 2", sink.sum("narwhal.attempts.endpoint.completions.model.sim-model"))
		})
	if got := sink.sum("narwhal.retries.reason.first_token_timeout"); got != 1 {
		t.Errorf("retries = %v", got)
	}
	line := h.accessLines()[0]
	if line["attempts"] != 2.0 || line["ttft_s"].(float64) < 0.4 {
		t.Fatalf("access log: %v", line)
	}
}

func TestAccessLogHasOneLinePerRequestAndNoPromptText(t *testing.T) {
	h := start(t, setup{prefill: 1, decode: 1, engine: sim.Options{Tokens: 2}})
	secret := "the-secret-prompt-words"
	h.post("/v1/completions", `{"model":"sim-model","prompt":"`+secret+`"}`, "X-Request-Id", "req-a")
	h.post("/v1/chat/completions", `{"model":"sim-model","messages":[{"role":"user","content":"`+secret+`"}],"stream":true}`, "X-Request-Id", "req-b")
	h.post("/v1/completions", `{"model":"nope","prompt":"`+secret+`"}`, "X-Request-Id", "req-c")
	eventually(t, 2*time.Second, func() bool { return strings.Count(string(h.access.Bytes()), "\n") == 3 },
		func() string { return "want 3 access log lines:\n" + string(h.access.Bytes()) })
	if bytes.Contains(h.access.Bytes(), []byte(secret)) || bytes.Contains(h.access.Bytes(), []byte("alpha")) {
		t.Fatalf("prompt or output text in the access log:\n%s", h.access.Bytes())
	}
	want := map[string]map[string]any{
		"req-a": {"endpoint": "completions", "status": 200.0, "outcome": "success", "attempts": 1.0, "producer": "p0", "consumer": "d0"},
		"req-b": {"endpoint": "chat", "status": 200.0, "outcome": "success", "stream": true},
		"req-c": {"status": 404.0, "outcome": "rejected", "attempts": 0.0}, // never placed: no engine called
	}
	for _, l := range h.accessLines() {
		id, _ := l["request_id"].(string)
		for k, v := range want[id] {
			if l[k] != v {
				t.Errorf("%s: %s = %v, want %v", id, k, l[k], v)
			}
		}
		if id == "req-c" {
			for _, k := range []string{"backend_request_id", "producer", "consumer", "ttft_s", "first_byte_s"} {
				if _, ok := l[k]; ok {
					t.Errorf("%s was rejected before placement yet logs %s: %v", id, k, l)
				}
			}
		} else {
			for _, k := range []string{"ttft_s", "first_byte_s", "handoff_age_s", "total_s", "output_tokens", "backend_request_id"} {
				if _, ok := l[k]; !ok {
					t.Errorf("%s: no %s in %v", id, k, l)
				}
			}
		}
	}
}

func TestClientErrorsNeverRevealEngineURLs(t *testing.T) {
	dead, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	deadAddr := dead.Addr().String()
	dead.Close() // nothing listens there any more
	h := start(t, setup{admit: true, prefill: 1, decode: 1, config: func(c *config.Config) {
		c.Engines[1].URL = "http://" + deadAddr
	}})
	for _, prompt := range []string{"x", "@sim:prefill.status=500", "@sim:prefill.bad_descriptor=wrong_endpoint"} {
		resp, body := h.post("/v1/completions", `{"model":"sim-model","prompt":"`+prompt+`","stream":true}`)
		if resp.StatusCode < 500 {
			t.Fatalf("%s: status %d", prompt, resp.StatusCode)
		}
		for _, e := range h.fleet.Engines {
			host := strings.TrimPrefix(e.URL(), "http://")
			if bytes.Contains(body, []byte(host)) || bytes.Contains(body, []byte(e.KVEndpoint())) || bytes.Contains(body, []byte(deadAddr)) {
				t.Fatalf("%s: an engine address leaked to the client: %s", prompt, body)
			}
		}
	}
}

func TestAdminTokenGuardsEverythingButHealth(t *testing.T) {
	h := start(t, setup{prefill: 1, decode: 1, config: func(c *config.Config) { c.Server.AdminToken = "s3cret" }})
	for _, path := range []string{"/engines", "/debug/tree", "/metrics", "/debug/pprof/"} {
		if code, _ := h.adminDo("GET", path); code != 401 {
			t.Errorf("GET %s without a token: %d", path, code)
		}
	}
	for _, path := range []string{"/healthz", "/readyz"} {
		if code, _ := h.adminDo("GET", path); code != 200 {
			t.Errorf("GET %s: %d", path, code)
		}
	}
	req, _ := http.NewRequest("GET", h.admin+"/engines", nil)
	req.Header.Set("Authorization", "Bearer s3cret")
	resp, err := h.client.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	io.Copy(io.Discard, resp.Body)
	resp.Body.Close()
	if resp.StatusCode != 200 {
		t.Fatalf("with the token: %d", resp.StatusCode)
	}
}

func grep(s, substr string) string {
	var out []string
	sc := bufio.NewScanner(strings.NewReader(s))
	for sc.Scan() {
		if strings.Contains(sc.Text(), substr) {
			out = append(out, sc.Text())
		}
	}
	return strings.Join(out, "\n")
}
