package tests

import (
	"io"
	"net/http"
	"strconv"
	"strings"
	"testing"

	"github.com/narwhal-router/narwhal/bench/sim"
	"github.com/narwhal-router/narwhal/config"
)

// An engine's in-stream error message is the engine's own text, and it can name internal
// hosts. Clients always get the engine's status, type and code; its message only with
// server.expose_engine_errors (default off), else a generic one naming the fault kind. The
// access log's error_detail keeps the full text either way. Engine 4xx answers (HTTP status,
// not in-stream) pass through whole: they are about the client's request.

// withheldEngineError is the error object a client gets for an in-stream engine error while
// server.expose_engine_errors is off.
func withheldEngineError(code int, typ string) string {
	return `{"error":{"message":"engine reported an error (stream_error, status ` + strconv.Itoa(code) + `)","type":"` + typ +
		`","param":null,"code":` + strconv.Itoa(code) + `}}`
}

const internalMessage = "KV pull from 10.20.30.40:5600 failed"

// leakyStream is the hostile behaviour: each completion is answered with tokens tokens, then
// an in-stream error whose message names an internal address, then [DONE].
func leakyStream(tokens int) func(w http.ResponseWriter, r *http.Request) bool {
	return func(w http.ResponseWriter, r *http.Request) bool {
		w.Header().Set("Content-Type", "text/event-stream")
		var b strings.Builder
		for i := 0; i < tokens; i++ {
			b.WriteString(`data: {"id":"cmpl-l","object":"text_completion","created":1,"model":"sim-model","choices":[{"index":0,"text":"` +
				sim.TokenText(i) + `","logprobs":null,"finish_reason":null}]}` + "\n\n")
		}
		b.WriteString(`data: {"error":{"message":"` + internalMessage + `","type":"InternalServerError","param":null,"code":500}}` + "\n\n")
		b.WriteString("data: [DONE]\n\n")
		_, err := io.WriteString(w, b.String())
		return err != nil
	}
}

func TestEngineErrorTextIsWithheldUnlessExposed(t *testing.T) {
	leaked := `{"error":{"message":"` + internalMessage + `","type":"InternalServerError","param":null,"code":500}}`
	for _, expose := range []bool{false, true} {
		for _, tokens := range []int{0, 2} { // before commit, after commit
			name := "expose_engine_errors=" + strconv.FormatBool(expose) + "/tokens=" + strconv.Itoa(tokens)
			t.Run(name, func(t *testing.T) {
				h := start(t, setup{admit: true, prefill: 1, decode: 1, engine: sim.Options{Tokens: 4}, config: configs(
					func(c *config.Config) {
						c.Recovery.EjectAfter = 1000
						c.Server.ExposeEngineErrors = expose
					},
					hostileInFront(t, config.RoleDecode, leakyStream(tokens)))})
				want := withheldEngineError(500, "InternalServerError")
				if expose {
					want = leaked
				}
				r := h.send("/v1/completions", completion("hi", true))
				if tokens == 0 {
					if r.status != 500 || string(r.body) != want {
						t.Fatalf("got %d %s, want 500 %s", r.status, r.body, want)
					}
				} else if o := expectTerminalError(t, r, tokens, "500", envelope(t, []byte(want)).Message); o.errRaw != want {
					t.Fatalf("terminal event %s, want %s", o.errRaw, want)
				}
				if !expose && strings.Contains(string(r.body), "10.20.30.40") {
					t.Fatalf("the engine's internal address reached the client: %s", r.body)
				}
				status := 500
				if tokens > 0 {
					status = 200
				}
				l := h.expectAccess(r.id, status, 1, "stream_error")
				if d := str(l["error_detail"]); !strings.Contains(d, internalMessage) {
					t.Fatalf("access log error_detail %q lacks the engine's message", d)
				}
			})
		}
	}
}

// The simulator's in-stream error, with the switch off, as a non-streaming client sees it after
// tokens: the engine's status and type, the generic message; the log has the engine's text.
func TestSimulatedEngineErrorDetailIsLogged(t *testing.T) {
	h := start(t, setup{prefill: 1, decode: 1, engine: sim.Options{Tokens: 4}})
	r := h.send("/v1/chat/completions", chat("hi @sim:decode.error_in_stream=503@2", false))
	if want := withheldEngineError(503, "Service Unavailable"); r.status != 503 || string(r.body) != want {
		t.Fatalf("got %d %s, want 503 %s", r.status, r.body, want)
	}
	l := h.expectAccess(r.id, 503, 1, "stream_error")
	if d := str(l["error_detail"]); !strings.Contains(d, "Service Unavailable (simulated fault)") {
		t.Fatalf("access log error_detail %q lacks the engine's message", d)
	}
}
