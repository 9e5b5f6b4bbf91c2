package ingress

import (
	"bytes"
	"context"
	"net/http"
	"net/http/httptest"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/valyala/fasthttp"

	"github.com/narwhal-router/narwhal/config"
	"github.com/narwhal-router/narwhal/transport"
	"github.com/narwhal-router/narwhal/transport/kv"
	"github.com/narwhal-router/narwhal/transport/telemetry"
	"github.com/narwhal-router/narwhal/transport/wire"
)

// writes records every client write the relay makes and signals it.
type writes struct {
	got   [][]byte
	wrote chan struct{}
}

func (w *writes) Write(p []byte) (int, error) {
	w.got = append(w.got, bytes.Clone(p))
	w.wrote <- struct{}{}
	return len(p), nil
}

// An engine that flushes every event alone: each token goes out as it comes, except that the
// event finishing a choice leaves together with [DONE] (one write fewer per request); the first
// token is never held back, and neither is another choice's token after one finished (n > 1).
func TestRelayWritesTheFinishingEventWithDone(t *testing.T) {
	tok := func(choice, text, finish string) string {
		return `data: {"id":"c","object":"text_completion","created":1,"model":"m","choices":[{"index":` + choice + `,"text":"` + text + `","finish_reason":` + finish + "}]}\n\n"
	}
	usage := `data: {"id":"c","object":"text_completion","created":1,"model":"m","choices":[],"usage":{"prompt_tokens":1,"completion_tokens":3,"total_tokens":4}}` + "\n\n"
	done := "data: [DONE]\n\n"
	for _, tc := range []struct {
		name   string
		events []string
		// waitAfter: the engine sends the next event only once the relay wrote (the events
		// up to here must have left); want: the client writes.
		waitAfter []int
		want      []string
	}{
		{name: "one choice", events: []string{tok("0", " a", "null"), tok("0", " b", "null"), tok("0", " c", `"length"`), usage, done},
			waitAfter: []int{0, 1}, want: []string{"0", "1", "2 3 4"}},
		{name: "two choices", events: []string{tok("0", " a", "null"), tok("0", " b", `"stop"`), tok("1", " x", "null"), tok("1", " y", `"stop"`), usage, done},
			waitAfter: []int{0, 2}, want: []string{"0", "1 2", "3 4 5"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			relayWrites(t, tc.events, tc.waitAfter, tc.want)
		})
	}
}

// relayFrom opens a streaming completion's decode stream on the engine at url and returns the
// relay that would carry it to a client; the stream and its engine client close with the test.
func relayFrom(t *testing.T, url string) *relay {
	t.Helper()
	client, body := decodeClient(t, url, `{"model":"m","prompt":"p","stream":true,"stream_options":{"include_usage":true}}`)
	x := NewExchange("w", body, time.Now(), time.Now().Add(time.Minute))
	s, err := client.Decode(context.Background(), transport.PrefillResult{}, x.EngineRequest("w"))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.Close() })
	return newRelay(&Ingress{metrics: telemetry.Noop()}, &fasthttp.RequestCtx{}, x, s, goneWatch{})
}

// decodeClient is an engine client for a decode engine at url, closed with the test, and a
// streaming completion's client body to send it.
func decodeClient(tb testing.TB, url, body string) (*transport.EngineClient, *wire.ClientBody) {
	tb.Helper()
	cfg := config.Default()
	cfg.Engines = []config.Engine{{Name: "d0", URL: url, Role: config.RoleDecode},
		{Name: "p0", URL: "http://127.0.0.1:1", Role: config.RolePrefill}}
	engines, err := transport.NewProvisioner(kv.Builtin(), cfg.ReservedPorts()).Engines(cfg.Engines, "test")
	if err != nil {
		tb.Fatal(err)
	}
	client := transport.NewEngineClient(engines[0], cfg.Engine, cfg.Server.MaxResponseBytes)
	tb.Cleanup(client.Close)
	b, err := wire.ParseClientBody(wire.EndpointCompletions, []byte(body))
	if err != nil {
		tb.Fatal(err)
	}
	return client, b
}

// lockstepEngine serves chunks as one event stream, flushing each; after chunk i, when
// waitAfter(i), it sends the next only once the relay has written to rec (giving up after 5 s).
// It closes with the test, after the stream and its client (cleanups run last first).
func lockstepEngine(t *testing.T, chunks []string, waitAfter func(i int) bool, rec *writes) string {
	engine := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		w.Header().Set("Content-Type", "text/event-stream")
		for i, ch := range chunks {
			w.Write([]byte(ch))
			w.(http.Flusher).Flush()
			if waitAfter(i) {
				select {
				case <-rec.wrote:
				case <-time.After(5 * time.Second):
					return
				}
			}
		}
	}))
	t.Cleanup(engine.Close)
	return engine.URL
}

func relayWrites(t *testing.T, events []string, waitAfter []int, want []string) {
	rec := &writes{wrote: make(chan struct{}, len(events))}
	r := relayFrom(t, lockstepEngine(t, events, func(i int) bool { return slices.Contains(waitAfter, i) }, rec))
	if _, err := r.WriteTo(rec); err != nil {
		t.Fatal(err)
	}
	var wantBytes []string
	for _, w := range want {
		var b strings.Builder
		for _, i := range strings.Fields(w) {
			n, _ := strconv.Atoi(i)
			b.WriteString(events[n])
		}
		wantBytes = append(wantBytes, b.String())
	}
	if len(rec.got) != len(wantBytes) {
		t.Fatalf("%d writes, want %d: %q", len(rec.got), len(wantBytes), rec.got)
	}
	for i := range wantBytes {
		if string(rec.got[i]) != wantBytes[i] {
			t.Fatalf("write %d: %q, want %q", i, rec.got[i], wantBytes[i])
		}
	}
}

// Half of the next event in the buffer is no reason to wait: the event before it leaves at once
// (were it held for the rest, this engine, which sends the rest only after that write, would
// stall the stream until its 5 s give-up).
func TestRelayNeverWaitsForHalfAnEvent(t *testing.T) {
	tok := func(text, finish string) string {
		return `data: {"id":"c","object":"text_completion","created":1,"model":"m","choices":[{"index":0,"text":"` + text + `","finish_reason":` + finish + "}]}\n\n"
	}
	usage := `data: {"id":"c","object":"text_completion","created":1,"model":"m","choices":[],"usage":{"prompt_tokens":1,"completion_tokens":3,"total_tokens":4}}` + "\n\n"
	a, b, c, done := tok(" a", "null"), tok(" b", "null"), tok(" c", `"length"`), "data: [DONE]\n\n"
	// One chunk carries b and the first part of c; the rest of c comes only after b is written.
	chunks := []string{a, b + c[:40], c[40:] + usage + done}
	rec := &writes{wrote: make(chan struct{}, 8)}
	r := relayFrom(t, lockstepEngine(t, chunks, func(int) bool { return true }, rec))
	start := time.Now()
	if _, err := r.WriteTo(rec); err != nil {
		t.Fatal(err)
	}
	want := []string{a, b, c + usage + done}
	if !slices.Equal(func() []string {
		var got []string
		for _, g := range rec.got {
			got = append(got, string(g))
		}
		return got
	}(), want) {
		t.Fatalf("writes %q, want %q", rec.got, want)
	}
	if took := time.Since(start); took > 4*time.Second {
		t.Fatalf("the relay waited %s for the rest of an event", took)
	}
}
