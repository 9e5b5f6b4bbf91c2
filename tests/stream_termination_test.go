package tests

import (
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/narwhal-router/narwhal/bench/sim"
	"github.com/narwhal-router/narwhal/config"
)

// How an engine stream may end (seed page, "Successful stream termination"): generated output
// then data: [DONE] is the only success. A close before [DONE] is an engine failure, [DONE]
// before any token is a 502, and an error object inside the 200 stream propagates with its own
// status. After commit every failure is exactly one terminal error event, never [DONE].

// terminationHarness is a 1p+1d fleet that never ejects an engine, so every case sees the
// same fleet.
func terminationHarness(t *testing.T, tokens int) *harness {
	return start(t, setup{prefill: 1, decode: 1, engine: sim.Options{Tokens: tokens}, config: func(c *config.Config) {
		c.Recovery.EjectAfter = 1000
	}})
}

func TestOnlyDoneEndsAStreamSuccessfully(t *testing.T) {
	h := terminationHarness(t, 3)
	for _, path := range []string{"/v1/completions", "/v1/chat/completions"} {
		body := completion("hi", true)
		if strings.Contains(path, "chat") {
			body = chat("hi", true)
		}
		r := h.send(path, body)
		o := expectDone(t, r)
		if o.text != expectedText(3) || strings.Count(string(r.body), "data: [DONE]") != 1 {
			t.Fatalf("%s: %q", path, r.body)
		}
		h.expectAccess(r.id, 200, 1, "")
	}
}

func TestStreamClosedBeforeDoneIsAnEngineFailure(t *testing.T) {
	h := terminationHarness(t, 3)
	t.Run("before any token", func(t *testing.T) {
		r := h.send("/v1/completions", completion("hi @sim:decode.close_after=0", true))
		expectError(t, r, 502, "closed_early", "stream closed before [DONE]")
		h.expectAccess(r.id, 502, 1, "closed_early")
	})
	t.Run("after tokens", func(t *testing.T) {
		r := h.send("/v1/chat/completions", chat("hi @sim:decode.close_after=2", true))
		o := expectTerminalError(t, r, 2, "closed_early", "stream closed before [DONE]")
		if o.err.Type != "bad_gateway" {
			t.Fatalf("terminal event %s", o.errRaw)
		}
		h.expectAccess(r.id, 200, 1, "closed_early")
	})
	t.Run("after the last token", func(t *testing.T) {
		// Every token arrived, but without [DONE] the router cannot know the output is whole.
		r := h.send("/v1/completions", completion("hi @sim:decode.close_after=3", true))
		expectTerminalError(t, r, 3, "closed_early", "stream closed before [DONE]")
	})
	t.Run("non-streaming client", func(t *testing.T) {
		r := h.send("/v1/completions", completion("hi @sim:decode.close_after=2", false))
		expectError(t, r, 502, "closed_early", "stream closed before [DONE]")
		h.expectAccess(r.id, 502, 1, "closed_early")
	})
}

func TestDoneBeforeAnyTokenIs502(t *testing.T) {
	h := terminationHarness(t, 3)
	const want = `{"error":{"message":"stream ended with [DONE] before any token arrived","type":"bad_gateway","param":null,"code":"done_before_token"}}`
	for _, tc := range []struct{ name, path, body string }{
		{"completions", "/v1/completions", completion("hi @sim:decode.done_first", true)},
		{"chat, after the role delta", "/v1/chat/completions", chat("hi @sim:decode.done_first", true)},
		{"non-streaming", "/v1/completions", completion("hi @sim:decode.done_first", false)},
	} {
		t.Run(tc.name, func(t *testing.T) {
			r := h.send(tc.path, tc.body)
			if r.status != 502 || string(r.body) != want {
				t.Fatalf("got %d %s, want 502 %s", r.status, r.body, want)
			}
			h.expectAccess(r.id, 502, 1, "done_before_token")
		})
	}
}

// An error object inside an upstream 200 stream carries its own status: before commit the
// client gets that status and the engine's error object; after commit that object is the
// terminal event (and the engine's [DONE] after it is not relayed). The engine's message reaches
// the client only with server.expose_engine_errors; by default the object keeps the engine's
// type, param and code and says which fault it was (engine_errors_test.go has the why).
func TestErrorEventInsideA200StreamPropagates(t *testing.T) {
	for _, expose := range []bool{false, true} {
		t.Run("expose_engine_errors="+strconv.FormatBool(expose), func(t *testing.T) {
			h := start(t, setup{prefill: 1, decode: 1, engine: sim.Options{Tokens: 4}, config: func(c *config.Config) {
				c.Recovery.EjectAfter = 1000
				c.Server.ExposeEngineErrors = expose
			}})
			engineBody := func(code int, message, typ string) string {
				if !expose {
					return withheldEngineError(code, typ)
				}
				return `{"error":{"message":"` + message + ` (simulated fault)","type":"` + typ + `","param":null,"code":` +
					strconv.Itoa(code) + `}}`
			}
			before := []struct {
				name, path, body string
				status           int
				want             string
			}{
				{"5xx before any token", "/v1/completions", completion("hi @sim:decode.error_in_stream=500", true), 500,
					engineBody(500, "Internal server error", "InternalServerError")},
				{"503 before any token", "/v1/completions", completion("hi @sim:decode.error_in_stream=503", true), 503,
					engineBody(503, "Service Unavailable", "Service Unavailable")},
				{"4xx before any token", "/v1/completions", completion("hi @sim:decode.error_in_stream=400", true), 400,
					engineBody(400, "Bad Request", "BadRequestError")},
				{"chat, after the role delta", "/v1/chat/completions", chat("hi @sim:decode.error_in_stream=500@0", true), 500,
					engineBody(500, "Internal server error", "InternalServerError")},
				{"non-streaming client, after tokens", "/v1/completions", completion("hi @sim:decode.error_in_stream=502@2", false), 502,
					engineBody(502, "Bad Gateway", "Bad Gateway")},
			}
			for _, tc := range before {
				t.Run(tc.name, func(t *testing.T) {
					r := h.send(tc.path, tc.body)
					if r.status != tc.status || string(r.body) != tc.want {
						t.Fatalf("got %d %s, want %d %s", r.status, r.body, tc.status, tc.want)
					}
					h.expectAccess(r.id, tc.status, 1, "stream_error")
				})
			}
			t.Run("after commit", func(t *testing.T) {
				r := h.send("/v1/chat/completions", chat("hi @sim:decode.error_in_stream=500@2", true))
				want := engineBody(500, "Internal server error", "InternalServerError")
				o := expectTerminalError(t, r, 2, "500", envelope(t, []byte(want)).Message)
				if o.errRaw != want {
					t.Fatalf("terminal event %s, want %s", o.errRaw, want)
				}
				h.expectAccess(r.id, 200, 1, "stream_error")
			})
			t.Run("after commit, 4xx", func(t *testing.T) {
				r := h.send("/v1/completions", completion("hi @sim:decode.error_in_stream=400@1", true))
				want := engineBody(400, "Bad Request", "BadRequestError")
				if o := expectTerminalError(t, r, 1, "400", envelope(t, []byte(want)).Message); o.errRaw != want {
					t.Fatalf("terminal event %s, want %s", o.errRaw, want)
				}
			})
		})
	}
}

// A stream that fails after commit ends with one terminal event even when the client is slow
// to read it: the event is the last bytes of a well-formed chunked response.
func TestTerminalEventIsTheLastThingOnTheWire(t *testing.T) {
	h := start(t, setup{prefill: 1, decode: 1, engine: sim.Options{Tokens: 4, ITL: 5 * time.Millisecond},
		config: timeouts(10, 10, 0.2)})
	r := h.send("/v1/completions", completion("hi @sim:decode.silence_after=3", true))
	o := expectTerminalError(t, r, 3, "silence", "engine went silent between tokens")
	if !strings.HasSuffix(string(r.body), "data: "+o.errRaw+"\n\n") {
		t.Fatalf("stream does not end with its error event: %q", r.body)
	}
}
