package tests

import (
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/narwhal-router/narwhal/bench/sim"
	"github.com/narwhal-router/narwhal/config"
	"github.com/narwhal-router/narwhal/messages"
	"github.com/narwhal-router/narwhal/transport/admin"
)

// A fleet that changes under a running router: engines added and removed through the admin
// API while clients keep sending, none of whom may see a failure.

// loadGen keeps clients sending streaming completions to a base URL until stop. Every request
// must end 200 with [DONE] and no error event; anything else is a failure, kept with what the
// client saw.
type loadGen struct {
	stopCh   chan struct{}
	wg       sync.WaitGroup
	ok       atomic.Int64
	mu       sync.Mutex
	failures []string
}

// startLoad starts clients goroutines, each sending body to base+path in a loop.
func startLoad(t *testing.T, base string, clients int, body string) *loadGen {
	t.Helper()
	l := &loadGen{stopCh: make(chan struct{})}
	client := &http.Client{Timeout: 30 * time.Second, Transport: &http.Transport{MaxIdleConnsPerHost: clients}}
	for range clients {
		l.wg.Add(1)
		go func() {
			defer l.wg.Done()
			for {
				select {
				case <-l.stopCh:
					return
				default:
				}
				if err := oneStream(client, base, body); err != nil {
					l.mu.Lock()
					l.failures = append(l.failures, err.Error())
					l.mu.Unlock()
					continue
				}
				l.ok.Add(1)
			}
		}()
	}
	t.Cleanup(func() { l.stop(); client.CloseIdleConnections() })
	return l
}

// oneStream sends one streaming completion and checks that it ended well.
func oneStream(client *http.Client, base, body string) error {
	resp, err := client.Post(base+"/v1/completions", "application/json", strings.NewReader(body))
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	switch {
	case err != nil:
		return fmt.Errorf("status %d, reading the stream: %v", resp.StatusCode, err)
	case resp.StatusCode != 200:
		return fmt.Errorf("status %d: %s", resp.StatusCode, b)
	case strings.Contains(string(b), `data: {"error"`) || !strings.HasSuffix(string(b), "data: [DONE]\n\n"):
		return fmt.Errorf("stream did not end with [DONE]: %q", b[max(0, len(b)-300):])
	}
	return nil
}

// stop ends the load and returns the successes and failures.
func (l *loadGen) stop() (ok int64, failures []string) {
	select {
	case <-l.stopCh:
	default:
		close(l.stopCh)
	}
	l.wg.Wait()
	return l.peek()
}

// waitServed waits until the load has had n more successes than it had.
func (l *loadGen) waitServed(t *testing.T, n int64) {
	t.Helper()
	target := l.ok.Load() + n
	eventually(t, 10*time.Second, func() bool { return l.ok.Load() >= target }, func() string {
		_, f := l.peek()
		return fmt.Sprintf("the load made %d of %d more requests; failures: %v", l.ok.Load()-(target-n), n, f)
	})
}

// peek is the successes and failures so far.
func (l *loadGen) peek() (ok int64, failures []string) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.ok.Load(), append([]string(nil), l.failures...)
}

// extraEngine starts one more simulated engine like the harness's, closed with the test.
func extraEngine(t *testing.T, h *harness, name string, role sim.Role) *sim.Engine {
	t.Helper()
	o := h.engineOpts
	o.Name, o.Role = name, role
	e, err := sim.Start(o)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { e.Close() })
	return e
}

// engineJSON is e as POST /engines takes it: an item of the configuration's engines list.
func engineJSON(e *sim.Engine) string {
	b, _ := json.Marshal(map[string]any{"name": e.Name(), "url": e.URL(), "role": string(e.Role()), "models": e.Models(),
		"kv": map[string]any{"engine_id": e.EngineID(), "endpoint": e.KVEndpoint(), "transfer_modes": []string{"pull"}}})
	return string(b)
}

// adminSend sends body to the admin listener.
func (h *harness) adminSend(method, path, body string) (int, []byte) {
	h.t.Helper()
	req, err := http.NewRequest(method, h.admin+path, strings.NewReader(body))
	if err != nil {
		h.t.Fatal(err)
	}
	req.Header.Set(admin.AdminHeader, "1") // a tokenless change must show it is no browser's
	resp, err := h.client.Do(req)
	if err != nil {
		h.t.Fatalf("%s %s: %v", method, path, err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, b
}

// findEngine is the router's view of the named engine, if it has one.
func (h *harness) findEngine(name string) (messages.EngineState, bool) {
	for _, e := range h.engines() {
		if e.Name == name {
			return e, true
		}
	}
	return messages.EngineState{}, false
}

// Decode scales from 2 to 8 engines under load, added one by one through the admin API: each
// new engine joins (its check runs before it takes traffic), then takes its share, and no
// client sees a failure.
func TestScaleDecodeFromTwoToEightUnderLoad(t *testing.T) {
	h := start(t, setup{prefill: 2, decode: 2, engine: sim.Options{Tokens: 8, ITL: 2 * time.Millisecond},
		config: func(c *config.Config) { c.Placement.Policy = config.PlaceP2C }})
	load := startLoad(t, h.base, 8, completion("scale me", true))
	load.waitServed(t, 20)
	var added []*sim.Engine
	for i := 2; i < 8; i++ {
		e := extraEngine(t, h, fmt.Sprintf("d%d", i), sim.RoleDecode)
		code, body := h.adminSend("POST", "/engines", engineJSON(e))
		if code != http.StatusCreated {
			t.Fatalf("POST /engines %s: %d %s", e.Name(), code, body)
		}
		var st messages.EngineState
		if err := json.Unmarshal(body, &st); err != nil || st.Name != e.Name() || st.Source != "admin" {
			t.Fatalf("POST /engines answered %s (%v)", body, err)
		}
		added = append(added, e)
	}
	for _, e := range added {
		h.waitState(e.Name(), "admitted", 5*time.Second)
	}
	before := map[string]int64{}
	for _, e := range added {
		before[e.Name()] = e.Stats().DecodeRequests
	}
	load.waitServed(t, 200)
	ok, failures := load.stop()
	if len(failures) > 0 {
		t.Fatalf("%d of %d requests failed while decode scaled from 2 to 8: %v", len(failures), ok+int64(len(failures)), failures[:min(5, len(failures))])
	}
	for _, e := range added {
		if n := e.Stats().DecodeRequests - before[e.Name()]; n == 0 {
			t.Errorf("the added engine %s served no decode leg of %d requests", e.Name(), ok)
		}
	}
	eventually(t, 3*time.Second, func() bool { return h.metric(`narwhal_fleet_engines{state="admitted"}`) == 10 }, func() string {
		return "narwhal_fleet_engines: " + grep(h.scrape(), "narwhal_fleet_engines")
	})
	t.Logf("decode 2 → 8 under load: %d requests, 0 failed", ok)
}

// An engine removed while streams run on it lets them finish; it gets no new placement, shows
// as removing while they do, and then is gone: its actor, its scraper and its metric series.
func TestRemovingAnEngineLetsItsStreamsFinish(t *testing.T) {
	h := start(t, setup{prefill: 1, decode: 1, engine: sim.Options{Tokens: 10, ITL: 30 * time.Millisecond},
		config: func(c *config.Config) { c.Placement.ScrapeIntervalS = 0.05 }})
	d1 := extraEngine(t, h, "d1", sim.RoleDecode)
	if code, body := h.adminSend("POST", "/engines", engineJSON(d1)); code != http.StatusCreated {
		t.Fatalf("POST /engines: %d %s", code, body)
	}
	h.waitState("d1", "admitted", 5*time.Second)

	// Streams on both decoders, then d1 leaves with its share in flight.
	load := startLoad(t, h.base, 6, completion("remove me", true))
	eventually(t, 5*time.Second, func() bool { return d1.Stats().InFlight >= 2 }, func() string { return "no stream on d1" })
	inFlight := d1.Stats().InFlight
	if code, body := h.adminSend("DELETE", "/engines/d1", ""); code != 200 || !strings.Contains(string(body), `"removing"`) {
		t.Fatalf("DELETE /engines/d1: %d %s", code, body)
	}
	removed := time.Now() // the fleet placement reads has no d1 from here on
	if e, ok := h.findEngine("d1"); !ok || e.State != "removing" || e.Reserved.Decode == 0 {
		t.Fatalf("d1 right after its removal, %d streams on it: %+v (present %v)", inFlight, e, ok)
	}
	// Its streams end normally (the load checks every one), then it is gone.
	eventually(t, 5*time.Second, func() bool { _, ok := h.findEngine("d1"); return !ok },
		func() string { e, _ := h.findEngine("d1"); return fmt.Sprintf("d1 still there: %+v", e) })
	placed := d1.Stats().DecodeRequests
	load.waitServed(t, 12)
	ok, failures := load.stop()
	if len(failures) > 0 {
		t.Fatalf("%d requests failed around the removal: %v", len(failures), failures[:min(5, len(failures))])
	}
	if n := d1.Stats().DecodeRequests - placed; n != 0 {
		t.Fatalf("%d decode legs reached d1 after it was gone", n)
	}
	// No request that arrived after the removal was placed on d1 (the access log's time minus
	// its total is the arrival, a little late: the line is written just after the end).
	for _, l := range h.accessLines() {
		end, err := time.Parse(time.RFC3339Nano, str(l["ts"]))
		if err != nil {
			t.Fatalf("access line ts %v: %v", l["ts"], err)
		}
		arrived := end.Add(-time.Duration(num(l["total_s"]) * float64(time.Second)))
		if l["consumer"] == "d1" && arrived.After(removed.Add(20*time.Millisecond)) {
			t.Fatalf("a request that arrived %v after d1's removal was placed on it: %v", arrived.Sub(removed), l)
		}
	}
	if st := d1.Stats(); st.Completed < inFlight || st.Aborted != 0 {
		t.Fatalf("d1's streams: %+v, want the %d in flight completed and none aborted", st, inFlight)
	}
	_, tree := h.adminDo("GET", "/debug/tree?format=text")
	if strings.Contains(string(tree), "d1 [engine]") {
		t.Fatalf("d1's actor is still in the tree:\n%s", tree)
	}
	if strings.Contains(h.scrape(), `engine="d1"`) {
		t.Fatalf("d1's metric series are still exported:\n%s", grep(h.scrape(), `engine="d1"`))
	}
	scrapes := func(e *sim.Engine) int {
		n := 0
		for _, r := range e.Requests() {
			if r.Path == "/metrics" {
				n++
			}
		}
		return n
	}
	// d0's scraper ticks on the same interval d1's did: four more scrapes of d0 span at least
	// three intervals, in each of which a scraper left running on d1 would have scraped it too.
	d0 := h.fleet.Engine("d0")
	seen, d0Seen := scrapes(d1), scrapes(d0)
	eventually(t, 5*time.Second, func() bool { return scrapes(d0) >= d0Seen+4 },
		func() string { return fmt.Sprintf("d0 scraped %d times since, want 4", scrapes(d0)-d0Seen) })
	if n := scrapes(d1) - seen; n != 0 {
		t.Fatalf("d1 was scraped %d times after it left the fleet, while d0 was scraped %d times", n, scrapes(d0)-d0Seen)
	}
	t.Logf("removed d1 with %d streams in flight: %d requests, 0 failed", inFlight, ok)
}

// The admin API refuses what it cannot add — a body that is not an engine, a name another
// source has — with a status and a message that say why; it removes only what it added; and
// /discovery shows every source.
func TestAdminEngineRoutes(t *testing.T) {
	h := start(t, setup{prefill: 1, decode: 1})
	for _, tc := range []struct {
		body string
		code int
		want string
	}{
		{`{"name":"d9","url":"http://127.0.0.1:1","role":"decoder"}`, 400, `role: "decoder" is not allowed (allowed: prefill, decode, both)`},
		{`{"name":"d9","url":"http://127.0.0.1:1","role":"decode","maxinflight":2}`, 400, `unknown key "maxinflight"`},
		{`{"name":"d9","url":"ftp://x","role":"decode"}`, 400, "is not an engine base URL"},
		{`{"name":"d9","url":"http://127.0.0.1:1","role":"decode","kv":{"connector":"tcp"}}`, 400, `kv.connector: "tcp" is not allowed`},
		{`{"name":"d0","url":"http://127.0.0.1:1","role":"decode"}`, 409, "engine d0 comes from the file source"},
	} {
		code, body := h.adminSend("POST", "/engines", tc.body)
		if code != tc.code || !strings.Contains(string(body), tc.want) {
			t.Errorf("POST %s: %d %s, want %d with %q", tc.body, code, body, tc.code, tc.want)
		}
	}
	if code, body := h.adminSend("DELETE", "/engines/d0", ""); code != 409 || !strings.Contains(string(body), "comes from the file source") {
		t.Errorf("DELETE a file engine: %d %s", code, body)
	}
	if code, body := h.adminSend("DELETE", "/engines/nope", ""); code != 404 {
		t.Errorf("DELETE an unknown engine: %d %s", code, body)
	}
	// An engine that can never join (nothing listens there) is in the fleet, joining then
	// ejected, and shown with its source; the fleet stays ready.
	code, body := h.adminSend("POST", "/engines", `{"name":"d9","url":"http://127.0.0.1:1","role":"decode","models":["sim-model"]}`)
	if code != 201 || !strings.Contains(string(body), `"source": "admin"`) {
		t.Fatalf("POST a dead engine: %d %s", code, body)
	}
	e := h.waitState("d9", "ejected", 5*time.Second)
	if e.EjectedBy != "breaker" || !strings.Contains(e.EjectReason, "join check failed") || e.JoinCheck == nil || e.JoinCheck.Result != "failure" {
		t.Fatalf("the dead engine: %+v (join %+v)", e, e.JoinCheck)
	}
	if code, body := h.adminDo("GET", "/readyz"); code != 200 {
		t.Fatalf("/readyz with a dead engine beside live ones: %d %s", code, body)
	}
	code, body = h.adminDo("GET", "/discovery")
	var disc struct {
		Sources []struct {
			Name    string   `json:"name"`
			Up      bool     `json:"up"`
			Engines []string `json:"engines"`
		} `json:"sources"`
		Engines int `json:"engines"`
	}
	if err := json.Unmarshal(body, &disc); code != 200 || err != nil || disc.Engines != 3 || len(disc.Sources) < 2 ||
		disc.Sources[0].Name != "file" || !disc.Sources[0].Up || strings.Join(disc.Sources[0].Engines, ",") != "d0,p0" ||
		disc.Sources[1].Name != "admin" || strings.Join(disc.Sources[1].Engines, ",") != "d9" {
		t.Fatalf("/discovery: %d %s (%v)", code, body, err)
	}
	if code, body := h.adminSend("DELETE", "/engines/d9", ""); code != 200 {
		t.Fatalf("DELETE d9: %d %s", code, body)
	}
	eventually(t, 5*time.Second, func() bool { _, ok := h.findEngine("d9"); return !ok }, func() string { return "d9 still in the fleet" })
	expectDone(t, h.send("/v1/completions", completion("still fine", true)))
}

// With the admin token set, adding and removing engines needs it.
func TestAdminEngineRoutesNeedTheToken(t *testing.T) {
	h := start(t, setup{prefill: 1, decode: 1, config: func(c *config.Config) { c.Server.AdminToken = "s3cret" }})
	for _, r := range [][2]string{{"POST", "/engines"}, {"DELETE", "/engines/d0"}, {"GET", "/discovery"}} {
		if code, _ := h.adminSend(r[0], r[1], `{"name":"d9","url":"http://127.0.0.1:1","role":"decode"}`); code != 401 {
			t.Errorf("%s %s without the token: %d, want 401", r[0], r[1], code)
		}
	}
}
