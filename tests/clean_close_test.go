package tests

import (
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/narwhal-router/narwhal/bench/sim"
	"github.com/narwhal-router/narwhal/config"
	"github.com/narwhal-router/narwhal/messages"
)

// A decode engine that ends its stream in an orderly way (the end of a chunked body, or the
// close of a close-delimited one) after a token but without data: [DONE] has failed: the page
// says only [DONE] ends a stream successfully. The simulator's close_after cuts the chunked body
// mid-stream, which reads as a truncated body; the hostile engine (hostile_engine_test.go) ends
// it cleanly, which a reader sees as a plain end of input.

const (
	endBody   = "end"   // the handler returns: net/http writes the chunked body's last chunk
	closeConn = "close" // a close-delimited body (no length, no chunking), then the connection closes
)

// cleanEnd is the hostile behaviour: each completion is answered with a role chunk (chat), one
// token and an orderly end of the response (mode) without [DONE].
func cleanEnd(t *testing.T, mode string) func(w http.ResponseWriter, r *http.Request) bool {
	return func(w http.ResponseWriter, r *http.Request) bool {
		token, _ := json.Marshal(sim.TokenText(0))
		var events string
		if strings.HasSuffix(r.URL.Path, "/chat/completions") {
			events = `data: {"id":"chatcmpl-h","object":"chat.completion.chunk","created":1,"model":"sim-model","choices":[{"index":0,"delta":{"role":"assistant","content":""},"logprobs":null,"finish_reason":null}]}` + "\n\n" +
				`data: {"id":"chatcmpl-h","object":"chat.completion.chunk","created":1,"model":"sim-model","choices":[{"index":0,"delta":{"content":` + string(token) + `},"logprobs":null,"finish_reason":null}]}` + "\n\n"
		} else {
			events = `data: {"id":"cmpl-h","object":"text_completion","created":1,"model":"sim-model","choices":[{"index":0,"text":` + string(token) + `,"logprobs":null,"finish_reason":null}]}` + "\n\n"
		}
		if mode == closeConn {
			conn, buf, err := w.(http.Hijacker).Hijack()
			if err != nil {
				t.Errorf("hijack: %v", err)
				return false
			}
			defer conn.Close()
			_, _ = buf.WriteString("HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\nConnection: close\r\n\r\n" + events)
			_ = buf.Flush()
			return false
		}
		w.Header().Set("Content-Type", "text/event-stream")
		_, _ = io.WriteString(w, events)
		return false
	}
}

// hostileDecoders puts a hostile engine that ends its streams cleanly without [DONE] (mode) in
// front of every decode engine of the fleet; GETs (health, models, version) reach the simulator.
func hostileDecoders(t *testing.T, mode string) func(*config.Config) {
	return hostileInFront(t, config.RoleDecode, cleanEnd(t, mode))
}

func TestCleanEndWithoutDoneIsAnEngineFailure(t *testing.T) {
	for _, mode := range []string{endBody, closeConn} {
		t.Run(mode, func(t *testing.T) {
			h := start(t, setup{admit: true, prefill: 1, decode: 1, engine: sim.Options{Tokens: 3}, config: configs(
				retries(2),
				func(c *config.Config) { c.Recovery.EjectAfter = 1000 },
				hostileDecoders(t, mode))})

			t.Run("streaming chat", func(t *testing.T) {
				r := h.send("/v1/chat/completions", chat("hi", true))
				expectTerminalError(t, r, 1, "closed_early", "stream closed before [DONE]")
				if strings.Contains(string(r.body), "data: [DONE]") {
					t.Fatalf("a failed stream carries [DONE]: %q", r.body)
				}
				// Committed, so no retry: one attempt, the outcome a failure.
				h.expectAccess(r.id, 200, 1, "closed_early")
			})
			t.Run("streaming completions", func(t *testing.T) {
				r := h.send("/v1/completions", completion("hi", true))
				expectTerminalError(t, r, 1, "closed_early", "stream closed before [DONE]")
				h.expectAccess(r.id, 200, 1, "closed_early")
			})
			t.Run("non-streaming", func(t *testing.T) {
				// The body is assembled after commit, so nothing reached the client: an HTTP error
				// status, and no retry since the engine already generated.
				r := h.send("/v1/chat/completions", chat("hi", false))
				expectError(t, r, 502, "closed_early", "stream closed before [DONE]")
				h.expectAccess(r.id, 502, 1, "closed_early")
			})
			// Each of the three was a stream failure of the decode engine.
			if s := h.engine("d0").Streak; s != 3 {
				t.Fatalf("d0's failure streak is %d after three clean closes before [DONE], want 3", s)
			}
		})
	}
}

// The readmission probe of an engine that ends its decode that way fails: the engine stays out.
func TestProbeOfACleanEndWithoutDoneFails(t *testing.T) {
	for _, mode := range []string{endBody, closeConn} {
		t.Run(mode, func(t *testing.T) {
			h := start(t, setup{admit: true, prefill: 1, decode: 1, engine: sim.Options{Tokens: 3}, config: configs(
				func(c *config.Config) { c.Recovery.EjectAfter = 1 },
				hostileDecoders(t, mode))})
			r := h.send("/v1/completions", completion("hi", true))
			expectTerminalError(t, r, 1, "closed_early", "stream closed before [DONE]")
			h.waitState("d0", "ejected", 5*time.Second)
			var e messages.EngineState
			eventually(t, 10*time.Second, func() bool { e = h.engine("d0"); return e.LastProbe != nil },
				func() string { return fmt.Sprintf("no probe of d0 yet: %+v", e) })
			if e.LastProbe.Result != "failure" || !strings.Contains(e.LastProbe.Reason, "closed_early") || e.State != "ejected" {
				t.Fatalf("d0 after its probe: %s, last probe %+v; want still ejected after a closed_early failure", e.State, *e.LastProbe)
			}
		})
	}
}
