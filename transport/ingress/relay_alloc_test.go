package ingress

import (
	"bytes"
	"context"
	"io"
	"net/http"
	"net/http/httptest"
	"strconv"
	"testing"
	"time"

	"github.com/valyala/fasthttp"

	"github.com/narwhal-router/narwhal/transport"
	"github.com/narwhal-router/narwhal/transport/telemetry"
)

// The relay loop allocates nothing per token (issue #17): a stream of 512 token events costs
// the same number of allocations as one of 16 — the per-request ones (the decode leg, the
// stream, the relay) and nothing more.
func TestRelayAllocatesNothingPerToken(t *testing.T) {
	if raceEnabled {
		t.Skip("allocation budgets do not hold under the race detector (sync.Pool drops items at random)")
	}
	event := "data: {\"id\":\"cmpl-1\",\"object\":\"text_completion\",\"created\":1,\"model\":\"m\",\"choices\":[{\"index\":0,\"text\":\" token\",\"logprobs\":null,\"finish_reason\":null}]}\n\n"
	streams := map[string][]byte{}
	for _, n := range []string{"16", "512"} {
		count := 16
		if n == "512" {
			count = 512
		}
		streams[n] = append(bytes.Repeat([]byte(event), count), "data: [DONE]\n\n"...)
	}
	engine := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "text/event-stream")
		// A flush every few events: the relay sees both batched and lone events.
		s := streams[r.Header.Get("X-Request-Id")]
		// A known length: the test engine itself then allocates nothing per write.
		w.Header().Set("Content-Length", strconv.Itoa(len(s)))
		for len(s) > 0 {
			n := min(len(s), 3*len(event)+7)
			w.Write(s[:n])
			w.(http.Flusher).Flush()
			s = s[n:]
		}
	}))
	defer engine.Close()
	client, body := decodeClient(t, engine.URL, `{"model":"m","prompt":"p","stream":true}`)
	in := &Ingress{metrics: telemetry.Noop()}
	relayOnce := func(id string) {
		x := NewExchange("alloc", body, time.Now(), time.Now().Add(time.Minute))
		s, err := client.Decode(context.Background(), transport.PrefillResult{}, x.EngineRequest(id))
		if err != nil {
			t.Fatal(err)
		}
		r := newRelay(in, &fasthttp.RequestCtx{}, x, s, goneWatch{})
		if n, err := r.WriteTo(io.Discard); err != nil || n != int64(len(streams[id])) {
			t.Fatalf("relayed %d of %d bytes: %v", n, len(streams[id]), err)
		}
		s.Close()
	}
	short := testing.AllocsPerRun(20, func() { relayOnce("16") })
	long := testing.AllocsPerRun(20, func() { relayOnce("512") })
	if perToken := (long - short) / (512 - 16); perToken > 0.01 {
		t.Fatalf("the relay allocates per token: %.0f allocations for 16 tokens, %.0f for 512 (%.3f per token)", short, long, perToken)
	}
	t.Logf("%.0f allocations per relayed stream, whatever its length", short)
}
