package tests

import (
	"bytes"
	"context"
	"net"
	"testing"
	"time"

	"github.com/valyala/fasthttp"

	"github.com/narwhal-router/narwhal/bench/sim"
	"github.com/narwhal-router/narwhal/config"
	"github.com/narwhal-router/narwhal/node"
	"github.com/narwhal-router/narwhal/transport/kv"
)

// BenchmarkRoutedRequest is one full routed request — prefill leg, handoff, decode leg, relay —
// against zero-latency simulated engines in the same process, sent by a fasthttp client. The
// figures include the simulator's and the client's work; bench/ measures the router alone.
func BenchmarkRoutedRequest(b *testing.B) {
	fleet, err := sim.StartFleet(sim.FleetOptions{Prefill: 1, Decode: 1, Engine: sim.Options{Tokens: 16}})
	if err != nil {
		b.Fatal(err)
	}
	defer fleet.Close()
	cfg := config.Default()
	cfg.Engines = fleetEngines(fleet)
	cfg.Log.AccessLog = false
	ln, _ := net.Listen("tcp", "127.0.0.1:0")
	rt, err := node.Provision(cfg, kv.Builtin())
	if err != nil {
		b.Fatal(err)
	}
	srv, err := node.Start(rt, node.Options{Listener: ln, AdminListener: mustListen(b)})
	if err != nil {
		b.Fatal(err)
	}
	defer srv.Shutdown(context.Background())
	joinCtx, cancelJoin := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancelJoin()
	if err := srv.WaitJoined(joinCtx); err != nil {
		b.Fatal(err)
	}
	client := &fasthttp.HostClient{Addr: srv.Addr(), MaxConns: 64}

	for _, tc := range []struct {
		name, path, body, end string
	}{
		{"stream_1_token", "/v1/completions", `{"model":"sim-model","prompt":"hello there","max_tokens":1,"stream":true}`, "data: [DONE]\n\n"},
		{"stream_16_tokens", "/v1/completions", `{"model":"sim-model","prompt":"hello there","max_tokens":16,"stream":true}`, "data: [DONE]\n\n"},
		{"chat_stream_16_tokens", "/v1/chat/completions", `{"model":"sim-model","messages":[{"role":"user","content":"hello there"}],"max_tokens":16,"stream":true}`, "data: [DONE]\n\n"},
		{"non_stream_16_tokens", "/v1/completions", `{"model":"sim-model","prompt":"hello there","max_tokens":16}`, `"usage"`},
		// The Messages API beside the same chat request: translated in, translated back out.
		{"messages_stream_16_tokens", "/v1/messages", `{"model":"sim-model","messages":[{"role":"user","content":"hello there"}],"max_tokens":16,"stream":true}`, "event: message_stop\n"},
		{"chat_non_stream_16_tokens", "/v1/chat/completions", `{"model":"sim-model","messages":[{"role":"user","content":"hello there"}],"max_tokens":16}`, `"usage"`},
		{"messages_non_stream_16_tokens", "/v1/messages", `{"model":"sim-model","messages":[{"role":"user","content":"hello there"}],"max_tokens":16}`, `"usage"`},
	} {
		b.Run(tc.name, func(b *testing.B) {
			req, resp := fasthttp.AcquireRequest(), fasthttp.AcquireResponse()
			defer fasthttp.ReleaseRequest(req)
			defer fasthttp.ReleaseResponse(resp)
			req.Header.SetMethod("POST")
			req.SetRequestURI("http://" + srv.Addr() + tc.path)
			req.Header.SetContentType("application/json")
			req.SetBodyString(tc.body)
			b.ReportAllocs()
			b.ResetTimer()
			for i := 0; i < b.N; i++ {
				if err := client.DoTimeout(req, resp, 10*time.Second); err != nil || resp.StatusCode() != 200 ||
					!bytes.Contains(resp.Body(), []byte(tc.end)) {
					b.Fatalf("%v %d %s", err, resp.StatusCode(), resp.Body())
				}
			}
		})
	}
}

func mustListen(b *testing.B) net.Listener {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		b.Fatal(err)
	}
	return ln
}
