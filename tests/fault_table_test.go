package tests

import (
	"strconv"
	"testing"

	"github.com/goccy/go-json"

	"github.com/narwhal-router/narwhal/bench/sim"
	"github.com/narwhal-router/narwhal/config"
	"github.com/narwhal-router/narwhal/messages"
	"github.com/narwhal-router/narwhal/transport/fault"
)

// TestFaultTableEndToEnd walks the failure-policy table (transport/fault: Kinds and Kind.Policy) and checks each
// row against a real request through the simulator: the status the client gets, whether the
// router retried (attempts in the access log), and whether the engines' failure streaks moved
// (GET /engines on the admin listener). The expectations come from the table itself, so a row
// that changes is checked as it now reads; a kind the test cannot produce must say why.
func TestFaultTableEndToEnd(t *testing.T) {
	type scenario struct {
		prompt string // fault directives in the prompt hit every attempt of the request
		// engineStatus is the status the engine reports, for rows whose status passes through.
		engineStatus int
		stream       bool
		headers      []string
		config       func(*config.Config)
		// afterCommit: the fault happens after the first token; a non-streaming client still
		// gets the row's status, but no fault after commit is ever retried.
		afterCommit bool
	}
	scenarios := map[fault.Kind][]scenario{
		fault.Unreachable:       {{prompt: "@sim:prefill.refuse"}},
		fault.Timeout:           {{prompt: "@sim:prefill.hang_headers"}},
		fault.FirstTokenTimeout: {{prompt: "@sim:decode.hang_first_token"}},
		fault.Silence:           {{prompt: "@sim:decode.silence_after=1", afterCommit: true}},
		fault.ClosedEarly: {
			{prompt: "@sim:decode.close_after=0"}, // the connection drops, the chunked body cut short
			// A token, then an orderly end of the body without [DONE] (clean_close_test.go).
			{config: hostileDecoders(t, endBody), afterCommit: true},
		},
		fault.DoneBeforeToken: {{prompt: "@sim:decode.done_first"}},
		fault.StreamError: {
			{prompt: "@sim:decode.error_in_stream=500", engineStatus: 500},
			{prompt: "@sim:decode.error_in_stream=422", engineStatus: 422},
		},
		fault.Status:       {{prompt: "@sim:prefill.status=500", engineStatus: 500}},
		fault.Backpressure: {{prompt: "@sim:prefill.status=429", engineStatus: 429}},
		fault.Rejected:     {{prompt: "@sim:prefill.status=400", engineStatus: 400}},
		fault.Descriptor:   {{prompt: "@sim:prefill.bad_descriptor=bad_blocks"}},
		fault.StaleHandoff: {{prompt: "@sim:prefill.slow_headers=400",
			config: func(c *config.Config) { c.Handoff.MaxAgeS = 0.2; c.Engine.PrefillTimeoutS = 5 }}},
		fault.MissingDescriptor: {{prompt: "@sim:prefill.bad_descriptor=null",
			config: func(c *config.Config) { c.Handoff.OnMissing = config.OnMissingFail }}},
		// Every decode event, the first token's included, is larger than 8 bytes.
		fault.HeldOverflow: {{config: func(c *config.Config) { c.Engine.MaxHeldBytes = 8 }}},
		// A non-streaming answer assembled from more event data than 64 bytes (four tokens).
		fault.ResponseTooLarge: {{config: func(c *config.Config) { c.Server.MaxResponseBytes = 64 }, afterCommit: true}},
		fault.Deadline: {{prompt: "@sim:prefill.hang_headers", headers: []string{"X-Narwhal-Deadline-S", "0.4"},
			config: func(c *config.Config) { c.Engine.PrefillTimeoutS = 5 }}},
	}
	// Kinds no prompt directive can produce, and where they are checked instead.
	elsewhere := map[fault.Kind]string{
		fault.BadResponse: "the simulator always answers readable JSON; transport tests cover unreadable engine answers",
		fault.Canceled:    "the client is gone, so nothing is on the wire: client_disconnect_test.go",
		fault.Aborted:     "a router shutdown: shutdown_test.go",
		fault.Overloaded:  "running out of file descriptors: transport/fault_test.go",
		fault.StaleEngineID: "a Mooncake producer restarted between two requests (no prompt directive restarts " +
			"an engine): mooncake_test.go",
	}

	for _, kind := range fault.Kinds() {
		row := kind.Policy()
		cases, ok := scenarios[kind]
		if !ok {
			if why := elsewhere[kind]; why == "" {
				t.Errorf("fault kind %s has no end-to-end scenario and no reason why", kind)
			}
			continue
		}
		for i, sc := range cases {
			t.Run(row.Name+"/"+strconv.Itoa(i), func(t *testing.T) {
				h := start(t, setup{admit: true, prefill: 2, decode: 2, engine: sim.Options{Tokens: 4}, config: configs(
					timeouts(0.3, 0.3, 0.3),
					retries(2),
					func(c *config.Config) {
						c.Recovery.EjectAfter = 1000
						c.Recovery.FailureQuarantineS = 0
						if sc.config != nil {
							sc.config(c)
						}
					})})
				r := h.send("/v1/completions", completion("hi "+sc.prompt, sc.stream), sc.headers...)

				f := &fault.Fault{Kind: kind, Status: sc.engineStatus}
				want := f.ClientStatus()
				if r.status != want {
					t.Fatalf("status %d, want %d (row %+v): %s", r.status, want, row, r.body)
				}
				if row.Status != fault.PassThrough {
					if e := envelope(t, r.body); e.code() != row.Name {
						t.Fatalf("error code %q, want the row's name %q", e.code(), row.Name)
					}
				}

				attempts := 1
				if f.Retriable() && !sc.afterCommit {
					attempts = 2
				}
				h.expectAccess(r.id, want, attempts, row.Name)

				// The access line is written after every leg's outcome went to its engine actor,
				// and /engines asks each engine actor behind those messages: no waiting needed.
				streak := 0
				for _, e := range h.adminEngines() {
					streak += e.Streak
				}
				wantStreak := 0
				if f.CountsAgainstEngine() {
					wantStreak = attempts
				}
				if streak != wantStreak {
					t.Fatalf("fleet failure streak %d after %d attempts, want %d (counts against engine: %v)",
						streak, attempts, wantStreak, f.CountsAgainstEngine())
				}
			})
		}
	}
}

// adminEngines reads GET /engines from the admin listener.
func (h *harness) adminEngines() []messages.EngineState {
	h.t.Helper()
	status, body := h.adminDo("GET", "/engines")
	if status != 200 {
		h.t.Fatalf("GET /engines: %d %s", status, body)
	}
	var out []messages.EngineState
	if err := json.Unmarshal(body, &out); err != nil {
		h.t.Fatalf("GET /engines: %v: %s", err, body)
	}
	return out
}
