package transport_test

import (
	"context"
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"testing"
	"time"

	"github.com/narwhal-router/narwhal/config"
	"github.com/narwhal-router/narwhal/transport"
	"github.com/narwhal-router/narwhal/transport/fault"
)

// An inference probe whose decode ends in an orderly way after a token but before [DONE] (the
// end of the chunked body, or the close of a close-delimited one) failed: readmission must not
// take it for a healthy engine.
func TestProbeEndedBeforeDoneFails(t *testing.T) {
	for _, mode := range []string{"end", "close"} {
		t.Run(mode, func(t *testing.T) {
			srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				var body struct{ Stream bool }
				b, _ := io.ReadAll(r.Body)
				if err := json.Unmarshal(b, &body); err != nil {
					t.Errorf("engine got %s: %v", b, err)
				}
				if !body.Stream { // the prefill leg
					w.Header().Set("Content-Type", "application/json")
					_, _ = io.WriteString(w, `{"id":"cmpl-p","object":"text_completion","created":1,"model":"m","choices":[{"index":0,"text":" a","logprobs":null,"finish_reason":"length"}],"usage":{"prompt_tokens":2,"completion_tokens":1,"total_tokens":3},"kv_transfer_params":null}`)
					return
				}
				const token = `data: {"id":"cmpl-d","object":"text_completion","created":1,"model":"m","choices":[{"index":0,"text":" a","logprobs":null,"finish_reason":null}]}` + "\n\n"
				if mode == "close" {
					conn, buf, err := w.(http.Hijacker).Hijack()
					if err != nil {
						t.Errorf("hijack: %v", err)
						return
					}
					defer conn.Close()
					_, _ = buf.WriteString("HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\nConnection: close\r\n\r\n" + token)
					_ = buf.Flush()
					return
				}
				w.Header().Set("Content-Type", "text/event-stream")
				_, _ = io.WriteString(w, token)
			}))
			defer srv.Close()
			c := transport.ClientFor(t, config.Engine{Name: "hostile", URL: srv.URL, Role: config.RoleBoth}, nil)

			rep, err := transport.ProbeTransfer(context.Background(), c, c, "m", 5*time.Second)
			f, ok := fault.As(err)
			if !ok || f.Kind != fault.ClosedEarly {
				t.Fatalf("probe = %+v, %v; want a closed_early stream failure", rep, err)
			}
			if rep.Tokens != 1 {
				t.Fatalf("probe read %d tokens before the end, want 1", rep.Tokens)
			}
		})
	}
}
