package ingress

import (
	"bytes"
	"context"
	"io"
	"net/http"
	"net/http/httptest"
	"testing"
	"time"

	"github.com/valyala/fasthttp"

	"github.com/narwhal-router/narwhal/transport"
	"github.com/narwhal-router/narwhal/transport/telemetry"
)

const relayEvents = 64

// BenchmarkRelay is the relay loop: a committed decode stream of 64 token events copied to the
// client. The engine is a local server that writes the whole stream at once, so the figure is
// the router's reading, classifying and writing (plus one decode request per op); ns/event is
// the per-token cost.
func BenchmarkRelay(b *testing.B) {
	event := "data: {\"id\":\"cmpl-1\",\"object\":\"text_completion\",\"created\":1,\"model\":\"m\",\"choices\":[{\"index\":0,\"text\":\" token\",\"logprobs\":null,\"finish_reason\":null}]}\n\n"
	stream := append(bytes.Repeat([]byte(event), relayEvents), "data: [DONE]\n\n"...)
	engine := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		w.Header().Set("Content-Type", "text/event-stream")
		w.Write(stream)
	}))
	defer engine.Close()
	client, body := decodeClient(b, engine.URL, `{"model":"m","prompt":"p","stream":true}`)
	in := &Ingress{metrics: telemetry.Noop()}
	b.ReportAllocs()
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		x := NewExchange("bench", body, time.Now(), time.Now().Add(time.Minute))
		s, err := client.Decode(context.Background(), transport.PrefillResult{}, x.EngineRequest("bench"))
		if err != nil {
			b.Fatal(err)
		}
		r := newRelay(in, &fasthttp.RequestCtx{}, x, s, goneWatch{})
		n, err := r.WriteTo(io.Discard)
		if err != nil || n != int64(len(stream)) || r.events != relayEvents {
			b.Fatalf("relayed %d bytes, %d events: %v", n, r.events, err)
		}
		s.Close()
	}
	b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N*relayEvents), "ns/event")
}
