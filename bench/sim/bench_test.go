package sim

import (
	"bytes"
	"io"
	"net/http"
	"strings"
	"testing"
)

// BenchmarkStreamedTokens measures how many streamed tokens one engine serves per
// second with --itl 0 to one keep-alive client in the same process. Run it on one core:
//
//	GOMAXPROCS=1 go test -run '^$' -bench StreamedTokens ./bench/sim/
func BenchmarkStreamedTokens(b *testing.B) {
	for _, tc := range []struct {
		name, path, body string
		maxNumSeqs       int
	}{
		{"completions", "/v1/completions", `{"prompt":"hello there","max_tokens":1000,"stream":true}`, 0},
		{"chat", "/v1/chat/completions", `{"messages":[{"role":"user","content":"hello there"}],"max_tokens":1000,"stream":true}`, 0},
		// The same through the capacity model's scheduler (zero-length steps): its cost
		// per token.
		{"completions capacity model", "/v1/completions", `{"prompt":"hello there","max_tokens":1000,"stream":true}`, 8},
	} {
		b.Run(tc.name, func(b *testing.B) {
			e := startEngine(b, Options{Tokens: 1000, MaxNumSeqs: tc.maxNumSeqs})
			client := &http.Client{Transport: &http.Transport{Proxy: nil}}
			defer client.CloseIdleConnections()
			buf := make([]byte, 64<<10)
			var last []byte
			b.ReportAllocs()
			b.ResetTimer()
			for range b.N {
				resp, err := client.Post(e.URL()+tc.path, "application/json", strings.NewReader(tc.body))
				if err != nil {
					b.Fatal(err)
				}
				last = last[:0]
				for {
					n, err := resp.Body.Read(buf)
					last = append(last[:0], buf[:n]...)
					if err == io.EOF {
						break
					}
					if err != nil {
						b.Fatal(err)
					}
				}
				resp.Body.Close()
			}
			b.StopTimer()
			if !bytes.HasSuffix(last, []byte("data: [DONE]\n\n")) {
				b.Fatalf("stream ended with %q", last)
			}
			if s := e.Stats(); s.Completed != int64(b.N) {
				b.Fatalf("completed %d of %d", s.Completed, b.N)
			}
			b.ReportMetric(float64(b.N)*1000/b.Elapsed().Seconds(), "tokens/s")
		})
	}
}

// BenchmarkHandoff measures prefill + crossed decode pairs (3 output tokens each).
func BenchmarkHandoff(b *testing.B) {
	p := startEngine(b, Options{Role: RolePrefill})
	d := startEngine(b, Options{Role: RoleDecode, Tokens: 3})
	client := &http.Client{Transport: &http.Transport{Proxy: nil}}
	defer client.CloseIdleConnections()
	prefill := prefillBody(fortyWords)
	b.ReportAllocs()
	b.ResetTimer()
	for range b.N {
		resp, err := client.Post(p.URL()+"/v1/completions", "application/json", strings.NewReader(prefill))
		if err != nil {
			b.Fatal(err)
		}
		body, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		resp, err = client.Post(d.URL()+"/v1/completions", "application/json",
			strings.NewReader(withKV(b, completionsStream(fortyWords), descriptorOf(b, body))))
		if err != nil {
			b.Fatal(err)
		}
		_, _ = io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
		if resp.StatusCode != 200 {
			b.Fatalf("decode %d", resp.StatusCode)
		}
	}
	b.StopTimer()
	if s := p.Stats(); s.BlocksRead != int64(3*b.N) || s.BlocksPinned != 0 {
		b.Fatalf("producer %+v", s)
	}
	b.ReportMetric(float64(b.N)/b.Elapsed().Seconds(), "handoffs/s")
}

func BenchmarkChunkEncoding(b *testing.B) {
	e := startEngine(b, Options{})
	g := &generation{e: e, req: &genRequest{model: "Qwen/Qwen3-0.6B", n: 1}, id: "chatcmpl-6f1c2d3e-0000-4000-8000-000000000003",
		created: 1760000001, plan: outputPlan{content: 1 << 20}}
	for _, tc := range []struct {
		name  string
		shape shape
	}{{"completions", newCompletionShape(g, 0)}, {"chat", newChatShape(g, 0)}} {
		b.Run(tc.name, func(b *testing.B) {
			buf := make([]byte, 0, 512)
			b.ReportAllocs()
			for i := range b.N {
				buf = tc.shape.appendPiece(buf[:0], i, "")
			}
		})
	}
}
