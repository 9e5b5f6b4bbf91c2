package sim

import (
	"testing"
	"time"

	"go.uber.org/goleak"
)

// Close stops every goroutine the engines started, with requests hung in every phase,
// streams in flight and KV connections idle between engines.
func TestCloseLeaksNothing(t *testing.T) {
	defer goleak.VerifyNone(t, goleak.IgnoreCurrent())

	f, err := StartFleet(FleetOptions{Prefill: 1, Decode: 1, Both: 1, Engine: Options{ITL: 100 * time.Millisecond, Tokens: 1000}})
	if err != nil {
		t.Fatal(err)
	}
	p, d := f.ByRole(RolePrefill)[0], f.ByRole(RoleDecode)[0]
	if f.Engine("b0") == nil || len(f.Engines) != 3 {
		t.Fatalf("fleet %+v", f.Infos())
	}
	defer f.Close()
	_, _, body := post(t, p.URL(), "/v1/completions", prefillBody("x"))
	w := exchange(t, d.URL(), request("/v1/completions", withKV(t, completionsStream("x @sim:decode.close_after=1"),
		descriptorOf(t, body))), time.Second, false)
	if !w.closed || p.Stats().BlocksRead != 1 {
		t.Errorf("handoff with close_after: closed=%v, producer %+v", w.closed, p.Stats())
	}
	var open []*wire
	for _, req := range [][]byte{
		request("/v1/completions", completionsStream("x @sim:decode.hang_headers")),
		request("/v1/completions", completionsStream("x @sim:decode.hang_first_token")),
		request("/v1/completions", completionsStream("x @sim:decode.silence_after=1")),
		request("/v1/chat/completions", chatStream("x")), // streaming for 100 s
		request("/v1/completions", prefillBody("x @sim:prefill.hang_headers")),
	} {
		w := exchange(t, d.URL(), req, 30*time.Millisecond, true)
		open = append(open, &w)
	}
	if n := d.Stats().InFlight; n != 5 {
		t.Errorf("%d requests in flight, want 5", n)
	}
	start := time.Now()
	if err := f.Close(); err != nil {
		t.Fatal(err)
	}
	if took := time.Since(start); took > time.Second {
		t.Errorf("Close took %v", took)
	}
	for _, w := range open {
		w.conn.Close()
	}
	testClient.CloseIdleConnections()
}
