package tests

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/narwhal-router/narwhal/bench/sim"
	"github.com/narwhal-router/narwhal/config"
	"github.com/narwhal-router/narwhal/internal/testwait"
	"github.com/narwhal-router/narwhal/messages"
	"github.com/narwhal-router/narwhal/node"

	"github.com/narwhal-router/narwhal/transport"
	"github.com/narwhal-router/narwhal/transport/kv"
	"github.com/narwhal-router/narwhal/transport/preflight"
)

// setup describes a simulated fleet and the router in front of it.
type setup struct {
	prefill, decode, both int
	engine                sim.Options
	// config adjusts the router configuration after the engines are filled in; fleetConfig
	// does too, knowing the started fleet (its engines' ports).
	config      func(*config.Config)
	fleetConfig func(*sim.Fleet, *config.Config)
	// connectors is the KV connector registry the router runs with; zero: kv.Builtin.
	connectors kv.Registry
	// noWait returns as soon as the router listens, without waiting for its engines to join
	// (tests of the start itself).
	noWait bool
	// admit has the operator admit every engine once its join check ended, whatever it found
	// (POST /engines/{name}/readmit?force=true): the tests of how requests meet an engine that
	// fails every request — one that broke after it joined — put it in the fleet this way.
	admit bool
	// resolver looks up engines' host names for the router's loop check (nil: the system's).
	resolver transport.Resolver
}

// harness is a running router with its fleet. Everything stops when the test ends, and the
// test fails if a reservation was left behind.
type harness struct {
	t     *testing.T
	fleet *sim.Fleet
	// engineOpts is the template the fleet's engines were started with.
	engineOpts sim.Options
	srv        *node.Server
	base       string
	admin      string
	access     *syncBuffer
	client     *http.Client
	// stopped is set once the test shut the router down itself.
	stopped bool
}

func start(t *testing.T, s setup) *harness {
	t.Helper()
	if s.prefill+s.decode+s.both == 0 {
		s.prefill, s.decode = 2, 2
	}
	fleet, err := sim.StartFleet(sim.FleetOptions{Prefill: s.prefill, Decode: s.decode, Both: s.both, Engine: s.engine})
	if err != nil {
		t.Fatal(err)
	}
	cfg := config.Default()
	cfg.Server.ShutdownGraceS = 2
	cfg.Server.DrainDelayS = 0 // no load balancer to tell: shutdown tests stop at once
	cfg.Engine.PrefillTimeoutS = 10
	cfg.Engine.FirstTokenTimeoutS = 10
	cfg.Engine.DecodeReadTimeoutS = 10
	cfg.Request.DeadlineS = 30
	cfg.Recovery.ProbeIntervalS = 0.2
	cfg.Recovery.ProbeMaxIntervalS = 1
	// A failure that may be its request's waits this long for evidence (actors/blameboard.go):
	// tests that break a whole fleet on one prompt see it ejected within a second.
	cfg.Recovery.BlameWindowS = 1
	cfg.Log.AccessLogFlushS = 0.005 // access-log lines appear within 5 ms: waits for them stay short
	// The tests' prompts are a few words: under the default (auto) none would pay a prefill
	// leg. Tests of the handoff need one; the disaggregation tests choose their own policy.
	cfg.Disaggregation.Policy = config.DisaggAlways
	cfg.Engines = fleetEngines(fleet)
	if s.config != nil {
		s.config(&cfg)
	}
	if s.fleetConfig != nil {
		s.fleetConfig(fleet, &cfg)
	}
	if len(s.connectors.Names()) == 0 {
		s.connectors = kv.Builtin()
	}
	rt, err := node.Provision(cfg, s.connectors)
	if err != nil {
		fleet.Close()
		t.Fatal(err)
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	adminLn, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	access := &syncBuffer{}
	srv, err := node.Start(rt, node.Options{Logger: testLogger(t), AccessLog: access, Listener: ln, AdminListener: adminLn,
		Resolver: s.resolver})
	if err != nil {
		fleet.Close()
		t.Fatal(err)
	}
	h := &harness{t: t, fleet: fleet, engineOpts: s.engine, srv: srv, base: "http://" + srv.Addr(), admin: "http://" + srv.AdminAddr(),
		access: access, client: &http.Client{Timeout: 60 * time.Second, Transport: &http.Transport{MaxIdleConnsPerHost: 64}}}
	t.Cleanup(func() {
		if !t.Failed() && !h.stopped {
			h.assertNoReservations()
		}
		h.client.CloseIdleConnections()
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		srv.Shutdown(ctx)
		fleet.Close()
	})
	if !s.noWait {
		h.waitJoined(s.admit)
	}
	return h
}

// waitJoined waits, as a load balancer would, until the router is ready, and further until no
// engine is joining any more (every test fleet's engines take part from its first request),
// then clears what the join checks sent to the simulated engines — their recorded requests
// and counters — so that a test sees its own traffic only.
func (h *harness) waitJoined(admit bool) {
	h.t.Helper()
	var last string
	eventually(h.t, 10*time.Second, func() bool {
		for _, e := range h.engines() {
			// The operator admits an engine once its check has run (one that cannot complete
			// stays joining, retrying); otherwise every engine must be through joining.
			if e.State == "joining" && (!admit || e.JoinCheck == nil) {
				last = fmt.Sprintf("engine %s still joining: %+v", e.Name, e.JoinCheck)
				return false
			}
		}
		if admit {
			for _, e := range h.engines() {
				if e.State != "admitted" {
					if code, body := h.adminDo("POST", "/engines/"+e.Name+"/readmit?force=true"); code != 200 {
						h.t.Fatalf("forced readmission of %s: %d %s", e.Name, code, body)
					}
				}
			}
		}
		ready, reason := h.srv.Router().Ready()
		if !ready {
			last = "not ready: " + reason
			return false
		}
		for _, e := range h.fleet.Engines {
			if e.Stats().InFlight != 0 {
				last = "a join check still runs on " + e.Name()
				return false
			}
		}
		return true
	}, func() string { return "the fleet did not join: " + last })
	for _, e := range h.fleet.Engines {
		e.ResetRecorded()
		e.ResetCounters()
	}
}

// fleetEngines configures a fleet the way an operator would: models listed, identities and
// KV endpoints pinned.
func fleetEngines(f *sim.Fleet) []config.Engine {
	var out []config.Engine
	for _, e := range f.Engines {
		out = append(out, config.Engine{
			Name: e.Name(), URL: e.URL(), Role: config.Role(e.Role()), Models: e.Models(),
			KV: config.KV{Connector: kv.NIXL, EngineID: e.EngineID(), Endpoint: e.KVEndpoint(), TransferModes: []string{"pull"}},
		})
	}
	return out
}

// shutdown stops the router as SIGTERM would.
func (h *harness) shutdown() error {
	h.stopped = true
	return h.srv.Shutdown(context.Background())
}

// post sends a JSON body to path and returns the response with its body read.
func (h *harness) post(path, body string, headers ...string) (*http.Response, []byte) {
	h.t.Helper()
	req, err := http.NewRequest(http.MethodPost, h.base+path, strings.NewReader(body))
	if err != nil {
		h.t.Fatal(err)
	}
	req.Header.Set("Content-Type", "application/json")
	for i := 0; i+1 < len(headers); i += 2 {
		req.Header.Set(headers[i], headers[i+1])
	}
	resp, err := h.client.Do(req)
	if err != nil {
		h.t.Fatalf("POST %s: %v", path, err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		h.t.Fatalf("POST %s: reading body: %v", path, err)
	}
	return resp, b
}

// engines returns the router's view of every engine.
func (h *harness) engines() []messages.EngineState {
	h.t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	es, err := h.srv.Router().Engines(ctx)
	if err != nil {
		h.t.Fatal(err)
	}
	return es
}

// assertNoReservations waits briefly for releases in flight, then fails if any engine still
// holds a reservation.
func (h *harness) assertNoReservations() {
	h.t.Helper()
	var held []string
	eventually(h.t, 3*time.Second, func() bool {
		held = held[:0]
		for _, e := range h.engines() {
			if e.Reserved.Prefill != 0 || e.Reserved.Decode != 0 {
				held = append(held, fmt.Sprintf("%s prefill=%d decode=%d", e.Name, e.Reserved.Prefill, e.Reserved.Decode))
			}
		}
		return len(held) == 0 && h.srv.Router().InFlight() == 0
	}, func() string {
		return fmt.Sprintf("reservations still held: %v; live requests: %d", held, h.srv.Router().InFlight())
	})
}

// accessLines returns the access log's records so far.
func (h *harness) accessLines() []map[string]any {
	var out []map[string]any
	eventually(h.t, 2*time.Second, func() bool { return h.access.Len() > 0 }, func() string { return "no access log line" })
	sc := bufio.NewScanner(bytes.NewReader(h.access.Bytes()))
	for sc.Scan() {
		var m map[string]any
		if err := json.Unmarshal(sc.Bytes(), &m); err != nil {
			h.t.Fatalf("access log line is not JSON: %q", sc.Text())
		}
		out = append(out, m)
	}
	return out
}

// legs returns the generation requests the fleet received, by leg kind.
func (h *harness) legs(kind string) []sim.RecordedRequest {
	var out []sim.RecordedRequest
	for _, e := range h.fleet.Engines {
		for _, r := range e.Requests() {
			if r.Leg == kind {
				out = append(out, r)
			}
		}
	}
	return out
}

// eventually checks cond until it holds, failing with msg() once the timeout has passed.
func eventually(t *testing.T, timeout time.Duration, cond func() bool, msg func() string) {
	t.Helper()
	testwait.Until(t, timeout, cond, msg)
}

// sseEvents splits an SSE body into its data payloads.
func sseEvents(t *testing.T, body []byte) []string {
	t.Helper()
	var out []string
	for _, ev := range strings.Split(string(body), "\n\n") {
		if ev == "" {
			continue
		}
		if !strings.HasPrefix(ev, "data: ") {
			t.Fatalf("event %q is not a data event", ev)
		}
		out = append(out, strings.TrimPrefix(ev, "data: "))
	}
	return out
}

type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuffer) Bytes() []byte {
	s.mu.Lock()
	defer s.mu.Unlock()
	return append([]byte(nil), s.b.Bytes()...)
}

func (s *syncBuffer) Len() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Len()
}

// testLogger sends the router's log to the test log (shown on failure or with -v); lines
// written after the test ended are dropped.
func testLogger(t *testing.T) *slog.Logger {
	w := &testWriter{t: t}
	t.Cleanup(func() { w.mu.Lock(); w.done = true; w.mu.Unlock() })
	return slog.New(slog.NewTextHandler(w, &slog.HandlerOptions{Level: slog.LevelInfo}))
}

type testWriter struct {
	t    *testing.T
	mu   sync.Mutex
	done bool
}

func (w *testWriter) Write(p []byte) (int, error) {
	w.mu.Lock()
	defer w.mu.Unlock()
	if !w.done {
		w.t.Log(strings.TrimRight(string(p), "\n"))
	}
	return len(p), nil
}

// producedDescriptors returns the kv_transfer_params of every prefill response the fleet sent.
func (h *harness) producedDescriptors() [][]byte {
	var out [][]byte
	for _, r := range h.legs("prefill") {
		var resp struct {
			KV json.RawMessage `json:"kv_transfer_params"`
		}
		if err := json.Unmarshal(r.Response, &resp); err != nil {
			h.t.Fatalf("prefill response is not JSON: %q", r.Response)
		}
		out = append(out, resp.KV)
	}
	return out
}

// adminDo sends a request without a body to the admin listener and returns the status and body.
func (h *harness) adminDo(method, path string) (int, []byte) {
	h.t.Helper()
	return h.adminSend(method, path, "")
}

// engine returns the router's view of one engine.
func (h *harness) engine(name string) messages.EngineState {
	h.t.Helper()
	for _, e := range h.engines() {
		if e.Name == name {
			return e
		}
	}
	h.t.Fatalf("no engine %q", name)
	return messages.EngineState{}
}

// waitState waits until the named engine's breaker is in state.
func (h *harness) waitState(name, state string, timeout time.Duration) messages.EngineState {
	h.t.Helper()
	var last messages.EngineState
	eventually(h.t, timeout, func() bool { last = h.engine(name); return last.State == state },
		func() string { return fmt.Sprintf("engine %s is %s, want %s (%+v)", name, last.State, state, last) })
	return last
}

// runPreflight runs `narwhal preflight` on cfg: provisioned as `narwhal serve` runs it, with
// Narwhal's own connectors.
func runPreflight(t *testing.T, cfg config.Config) preflight.Result {
	t.Helper()
	rt, err := node.Provision(cfg, kv.Builtin())
	if err != nil {
		t.Fatal(err)
	}
	return preflight.Run(context.Background(), rt.Engines, rt.Config)
}
