package telemetry

import (
	"net/http/httptest"
	"strconv"
	"strings"
	"testing"
	"time"

	prom "github.com/prometheus/client_golang/prometheus"
	"github.com/uber-go/tally/v4"
	tallyprom "github.com/uber-go/tally/v4/prometheus"
)

func TestRequestDoneRecordsTheContract(t *testing.T) {
	scope := tally.NewTestScope("", nil)
	m := New(scope)
	m.ServeModels([]string{"m1"})
	m.RequestDone(Request{Endpoint: "chat", Model: "m1", Status: 200, Outcome: "success", Attempts: 2,
		TTFT: 120 * time.Millisecond, FirstByte: 250 * time.Millisecond, Total: time.Second, OutputToks: 7, PromptToks: 30, CachedToks: 16})
	m.RequestDone(Request{Endpoint: "chat", Model: "m1", Status: 503, Outcome: "rejected", Total: time.Millisecond})
	snap := scope.Snapshot()
	counters := snap.Counters()
	for name, want := range map[string]int64{
		"requests+endpoint=chat,model=m1,outcome=success,status=200":  1,
		"requests+endpoint=chat,model=m1,outcome=rejected,status=503": 1,
		"attempts+endpoint=chat,model=m1":                             2,
		"output_tokens+endpoint=chat,model=m1":                        7,
		"prompt_tokens+endpoint=chat,model=m1":                        30,
		"cached_prompt_tokens+endpoint=chat,model=m1":                 16,
	} {
		if c := counters[name]; c == nil || c.Value() != want {
			t.Errorf("%s: %v, want %d", name, c, want)
		}
	}
	timers := snap.Timers()
	if tm := timers["ttft_s+endpoint=chat,model=m1"]; tm == nil || len(tm.Values()) != 1 || tm.Values()[0] != 120*time.Millisecond {
		t.Fatalf("ttft_s: %v", tm)
	}
	if tm := timers["first_byte_s+endpoint=chat,model=m1"]; tm == nil || len(tm.Values()) != 1 {
		t.Fatal("a rejected request must not record first_byte_s")
	}
}

// The model label takes the values the fleet serves, up to MaxModelLabels; a model the fleet
// does not serve, a request without one and models past the bound are all "other".
func TestModelLabelIsBounded(t *testing.T) {
	scope := tally.NewTestScope("", nil)
	m := New(scope)
	var served []string
	for i := range MaxModelLabels + 5 {
		served = append(served, "model-"+strconv.Itoa(i))
	}
	m.ServeModels(served[:3])
	m.ServeModels(served) // grows up to the bound, keeps what it had
	for _, name := range append([]string{"", "invented-by-a-client"}, served...) {
		m.RequestDone(Request{Endpoint: "chat", Model: name, Status: 200, Outcome: "success"})
	}
	values := map[string]int64{}
	for _, c := range scope.Snapshot().Counters() {
		if c.Name() == "requests" {
			values[c.Tags()["model"]] += c.Value()
		}
	}
	if len(values) != MaxModelLabels+1 {
		t.Fatalf("%d model label values, want %d served + other: %v", len(values), MaxModelLabels, values)
	}
	if values[OtherModel] != 2+5 || values["model-0"] != 1 || values["model-"+strconv.Itoa(MaxModelLabels-1)] != 1 {
		t.Fatalf("model label values: %v", values)
	}
}

func TestEngineStateIsOneForTheCurrentState(t *testing.T) {
	scope := tally.NewTestScope("", nil)
	m := New(scope)
	states := []string{"admitted", "quarantined", "ejected", "probing"}
	m.EngineState("d0", "admitted", states)
	m.EngineState("d0", "ejected", states)
	gauges := scope.Snapshot().Gauges()
	for _, st := range states {
		want := 0.0
		if st == "ejected" {
			want = 1
		}
		if g := gauges["engine_state+engine=d0,state="+st]; g == nil || g.Value() != want {
			t.Errorf("engine_state{engine=d0,state=%s}: %v, want %v", st, g, want)
		}
	}
}

func TestStatsdNameFlattensTagsInKeyOrder(t *testing.T) {
	got := StatsdName("requests", map[string]string{"status": "200", "endpoint": "chat", "outcome": "a.b/c"})
	if want := "requests.endpoint.chat.outcome.a_b_c.status.200"; got != want {
		t.Fatalf("%s, want %s", got, want)
	}
}

func BenchmarkRequestDone(b *testing.B) {
	m := New(tally.NewTestScope("", nil))
	m.ServeModels([]string{"m1"})
	r := Request{Endpoint: "chat", Model: "m1", Status: 200, Outcome: "success", Attempts: 1,
		TTFT: 10 * time.Millisecond, FirstByte: 20 * time.Millisecond, Total: time.Second, OutputToks: 32, PromptToks: 100, CachedToks: 64}
	b.ReportAllocs()
	for i := 0; i < b.N; i++ {
		m.RequestDone(r)
	}
}

func TestPrometheusNamesFollowTheConventions(t *testing.T) {
	for _, c := range []struct{ name, kind, want string }{
		{"requests", KindCounter, "narwhal_requests_total"},
		{"ttft_s", KindTimer, "narwhal_ttft_seconds"},
		{"inter_token_gap_s", KindHistogram, "narwhal_inter_token_gap_seconds"},
		{"queue_depth", KindGauge, "narwhal_queue_depth"},
	} {
		if got := PrometheusName(c.name, c.kind); got != c.want {
			t.Errorf("PrometheusName(%s, %s) = %s, want %s", c.name, c.kind, got, c.want)
		}
	}
}

// An engine that left the fleet leaves no series behind: its counters and gauges are deleted
// from the Prometheus scrape, a late report for it (tally reports a gauge set while the engine
// drained at its next flush) does not bring them back, and an engine added again under that
// name gets fresh series. Other engines' series are untouched.
func TestForgottenEngineSeriesLeaveTheScrape(t *testing.T) {
	reg := prom.NewRegistry()
	pr := tallyprom.NewReporter(tallyprom.Options{Registerer: reg, Gatherer: reg, OnRegisterError: func(error) {}})
	f := newFanout(pr)
	d0 := f.AllocateCounter("engine_faults", map[string]string{"engine": "d0", "leg": "decode", "kind": "silence"})
	d1 := f.AllocateCounter("engine_faults", map[string]string{"engine": "d1", "leg": "decode", "kind": "silence"})
	g0 := f.AllocateGauge("engine_inflight", map[string]string{"engine": "d0", "phase": "decode"})
	rej := f.AllocateCounter("descriptor_rejections", map[string]string{"producer": "d0", "reason": "x"})
	d0.ReportCount(2)
	d1.ReportCount(3)
	g0.ReportGauge(4)
	rej.ReportCount(1)
	scrape := func() string {
		rec := httptest.NewRecorder()
		pr.HTTPHandler().ServeHTTP(rec, httptest.NewRequest("GET", "/metrics", nil))
		return rec.Body.String()
	}
	before := scrape()
	for _, want := range []string{`narwhal_engine_faults_total{engine="d0",kind="silence",leg="decode"} 2`,
		`narwhal_engine_inflight{engine="d0",phase="decode"} 4`, `narwhal_descriptor_rejections_total{producer="d0",reason="x"} 1`} {
		if !strings.Contains(before, want) {
			t.Fatalf("scrape lacks %s:\n%s", want, before)
		}
	}
	f.forget("d0")
	g0.ReportGauge(0) // the drained engine's last gauge update, reported after it left
	d0.ReportCount(1)
	after := scrape()
	if strings.Contains(after, `"d0"`) {
		t.Fatalf("d0's series are still exported after it left:\n%s", after)
	}
	if !strings.Contains(after, `narwhal_engine_faults_total{engine="d1",kind="silence",leg="decode"} 3`) {
		t.Fatalf("d1's series went too:\n%s", after)
	}
	f.remember("d0")
	d0.ReportCount(5)
	if again := scrape(); !strings.Contains(again, `narwhal_engine_faults_total{engine="d0",kind="silence",leg="decode"} 5`) {
		t.Fatalf("d0 added again has no fresh series:\n%s", again)
	}
}
