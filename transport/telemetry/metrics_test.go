package telemetry

import (
	"testing"
	"time"

	"github.com/uber-go/tally/v4"
)

func TestRequestDoneRecordsTheContract(t *testing.T) {
	scope := tally.NewTestScope("", nil)
	m := New(scope)
	m.RequestDone(Request{Endpoint: "chat", Status: 200, Outcome: "success", Attempts: 2,
		TTFT: 120 * time.Millisecond, FirstByte: 250 * time.Millisecond, Total: time.Second, OutputToks: 7})
	m.RequestDone(Request{Endpoint: "chat", Status: 503, Outcome: "rejected", Total: time.Millisecond})
	snap := scope.Snapshot()
	counters := snap.Counters()
	if c := counters["requests+endpoint=chat,outcome=success,status=200"]; c == nil || c.Value() != 1 {
		t.Fatalf("requests counter: %v", counters)
	}
	if c := counters["attempts+endpoint=chat"]; c == nil || c.Value() != 2 {
		t.Fatalf("attempts: %v", c)
	}
	timers := snap.Timers()
	if tm := timers["ttft_s+endpoint=chat"]; tm == nil || len(tm.Values()) != 1 || tm.Values()[0] != 120*time.Millisecond {
		t.Fatalf("ttft_s: %v", tm)
	}
	if tm := timers["first_byte_s+endpoint=chat"]; tm == nil || len(tm.Values()) != 1 {
		t.Fatal("a rejected request must not record first_byte_s")
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
	r := Request{Endpoint: "chat", Status: 200, Outcome: "success", Attempts: 1,
		TTFT: 10 * time.Millisecond, FirstByte: 20 * time.Millisecond, Total: time.Second, OutputToks: 32}
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
