package tests

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/narwhal-router/narwhal/bench/sim"
	"github.com/narwhal-router/narwhal/config"
)

// parked is a request held open by the test.
type parked struct {
	id     string
	cancel context.CancelFunc
	done   chan struct{}
}

// park starts a streaming request and returns once its first event arrived (or, with
// waitEvent false, as soon as it is sent). Cancelling it hangs up.
func (h *harness) park(id, body string, waitEvent bool) *parked {
	h.t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	req, _ := http.NewRequestWithContext(ctx, http.MethodPost, h.base+"/v1/completions", strings.NewReader(body))
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("X-Request-Id", id)
	p := &parked{id: id, cancel: cancel, done: make(chan struct{})}
	first := make(chan error, 1)
	go func() {
		defer close(p.done)
		resp, err := h.client.Do(req)
		if err != nil {
			first <- err
			return
		}
		defer resp.Body.Close()
		line, err := bufio.NewReader(resp.Body).ReadString('\n')
		if err == nil && !strings.HasPrefix(line, "data: ") {
			err = fmt.Errorf("first line %q", line)
		}
		first <- err
		<-ctx.Done()
	}()
	if waitEvent {
		if err := <-first; err != nil {
			h.t.Fatalf("parking %s: %v", id, err)
		}
	}
	return p
}

func (p *parked) hangUp() { p.cancel(); <-p.done }

type treeNode struct {
	Name     string         `json:"name"`
	Kind     string         `json:"kind"`
	State    map[string]any `json:"state"`
	Children []treeNode     `json:"children"`
}

func (h *harness) tree() treeNode {
	h.t.Helper()
	code, body := h.adminDo("GET", "/debug/tree")
	if code != 200 {
		h.t.Fatalf("GET /debug/tree: %d %s", code, body)
	}
	var n treeNode
	if err := json.Unmarshal(body, &n); err != nil {
		h.t.Fatal(err)
	}
	return n
}

func (n treeNode) child(kind string) treeNode {
	for _, c := range n.Children {
		if c.Kind == kind {
			return c
		}
	}
	return treeNode{}
}

func TestTreeDumpShowsEveryParkedRequest(t *testing.T) {
	h := start(t, setup{prefill: 1, decode: 2, engine: sim.Options{Tokens: 8}, config: func(c *config.Config) {
		c.Engine.DecodeReadTimeoutS = 30
		c.Engine.PrefillTimeoutS = 30
	}})
	var reqs []*parked
	for i := 0; i < 3; i++ {
		reqs = append(reqs, h.park(fmt.Sprintf("stream-%d", i), `{"model":"sim-model","prompt":"@sim:decode.silence_after=1","stream":true}`, true))
	}
	reqs = append(reqs, h.park("in-prefill", `{"model":"sim-model","prompt":"@sim:prefill.hang_headers","stream":true}`, false))
	eventually(t, 3*time.Second, func() bool { return h.fleet.Engine("p0").Stats().InFlight == 1 },
		func() string { return "the prefill never reached the engine" })

	tree := h.tree()
	if tree.Kind != "guardian" || tree.child("pool").Name != "engines" {
		t.Fatalf("tree root: %+v", tree)
	}
	byID := map[string]map[string]any{}
	for _, r := range tree.child("requests").Children {
		byID[r.Name] = r.State
	}
	if len(byID) != 4 {
		t.Fatalf("%d requests in the dump, want 4: %v", len(byID), byID)
	}
	for i := 0; i < 3; i++ {
		s := byID[fmt.Sprintf("stream-%d", i)]
		res := s["reservations"].(map[string]any)
		if s["phase"] != "streaming" || s["producer"] != "p0" || !strings.HasPrefix(s["consumer"].(string), "d") ||
			res["prefill"] != 0.0 || res["decode"] != 1.0 || s["handoff_age_s"].(float64) <= 0 || s["elapsed_s"].(float64) <= 0 {
			t.Errorf("stream-%d: %v", i, s)
		}
	}
	s := byID["in-prefill"]
	if res := s["reservations"].(map[string]any); s["phase"] != "prefill" || s["producer"] != "p0" || res["prefill"] != 1.0 || res["decode"] != 1.0 {
		t.Errorf("in-prefill: %v", s)
	}
	var decodeHeld float64
	for _, e := range tree.child("pool").Children {
		r := e.State["reservations"].(map[string]any)
		decodeHeld += r["decode"].(float64)
		if e.Name == "p0" && r["prefill"] != 1.0 {
			t.Errorf("p0 reservations %v", r)
		}
	}
	if decodeHeld != 4 {
		t.Errorf("engines hold %v decode reservations, want 4", decodeHeld)
	}

	code, text := h.adminDo("GET", "/debug/tree?format=text")
	if code != 200 || !strings.Contains(string(text), "stream-0 [request] phase=streaming") || !strings.Contains(string(text), "  engines [pool]") {
		t.Fatalf("text dump:\n%s", text)
	}

	for _, r := range reqs {
		r.hangUp()
	}
	eventually(t, 3*time.Second, func() bool { return len(h.tree().child("requests").Children) == 0 },
		func() string {
			return fmt.Sprintf("requests still in the dump: %+v", h.tree().child("requests").Children)
		})
}
