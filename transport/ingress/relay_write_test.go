package ingress

import (
	"bytes"
	"context"
	"net/http"
	"net/http/httptest"
	"testing"
	"time"

	"github.com/valyala/fasthttp"

	"github.com/narwhal-router/narwhal/config"
	"github.com/narwhal-router/narwhal/transport"
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
// event finishing the choice leaves together with [DONE] (one write fewer per request), and
// the first token is never held back.
func TestRelayWritesTheFinishingEventWithDone(t *testing.T) {
	tok := func(text, finish string) string {
		return `data: {"id":"c","object":"text_completion","created":1,"model":"m","choices":[{"index":0,"text":"` + text + `","finish_reason":` + finish + "}]}\n\n"
	}
	events := []string{tok(" a", "null"), tok(" b", "null"), tok(" c", `"length"`),
		`data: {"id":"c","object":"text_completion","created":1,"model":"m","choices":[],"usage":{"prompt_tokens":1,"completion_tokens":3,"total_tokens":4}}` + "\n\n",
		"data: [DONE]\n\n"}
	rec := &writes{wrote: make(chan struct{}, len(events))}
	engine := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		w.Header().Set("Content-Type", "text/event-stream")
		for i, e := range events {
			w.Write([]byte(e))
			w.(http.Flusher).Flush()
			if i < 2 { // the first two tokens go out alone: the next comes once the relay wrote
				select {
				case <-rec.wrote:
				case <-time.After(5 * time.Second):
					return
				}
			}
		}
	}))
	defer engine.Close()
	client, err := transport.NewEngineClient(config.Engine{Name: "d0", URL: engine.URL, Role: config.RoleDecode}, config.Default().Engine)
	if err != nil {
		t.Fatal(err)
	}
	defer client.Close()
	body, err := wire.ParseClientBody(wire.EndpointCompletions, []byte(`{"model":"m","prompt":"p","stream":true,"stream_options":{"include_usage":true}}`))
	if err != nil {
		t.Fatal(err)
	}
	x := NewExchange("w", body, time.Now(), time.Now().Add(time.Minute))
	s, err := client.Decode(context.Background(), transport.PrefillResult{}, x.EngineRequest("w"))
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	r := newRelay(&Ingress{metrics: telemetry.Noop()}, &fasthttp.RequestCtx{}, x, s, func() {})
	if _, err := r.WriteTo(rec); err != nil {
		t.Fatal(err)
	}
	w := rec
	want := []string{events[0], events[1], events[2] + events[3] + events[4]}
	if len(w.got) != len(want) {
		t.Fatalf("%d writes, want %d: %q", len(w.got), len(want), w.got)
	}
	for i := range want {
		if string(w.got[i]) != want[i] {
			t.Fatalf("write %d: %q, want %q", i, w.got[i], want[i])
		}
	}
}
