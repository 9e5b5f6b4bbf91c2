package tests

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"io"
	"math/rand/v2"
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/narwhal-router/narwhal/bench/sim"
	"github.com/narwhal-router/narwhal/config"
)

// A few hundred concurrent requests with random faults (in the prompt, and injected once on
// random engines so that retries can succeed) and random client hang-ups, then the invariants
// that must hold whatever happened: exactly one outcome per request, a stream never goes on
// after [DONE] or an error event, no token reaches a client twice or out of order (a retry
// never duplicates visible output), every reservation is returned, no engine leg and no
// goroutine is left behind (TestMain's goleak).

const chaosTokens = 6

var chaosDirectives = []string{
	"", "", "", "", "", "", "", "", "", "", "", "", "", "", "", "", "", "", "", "", "", "", "",
	"@sim:decode.silence_after=2",
	"@sim:decode.close_after=3",
	"@sim:decode.close_after=0",
	"@sim:decode.done_first",
	"@sim:decode.error_in_stream=500@2",
	"@sim:decode.error_in_stream=503",
	"@sim:decode.error_in_stream=400",
	"@sim:decode.status=500",
	"@sim:decode.status=429",
	"@sim:decode.status=400",
	"@sim:decode.refuse",
	"@sim:decode.hang_first_token",
	"@sim:decode.hang_headers",
	"@sim:decode.slow_first_token=150",
	"@sim:decode.keepalive=40 @sim:decode.silence_after=1",
	"@sim:prefill.status=500",
	"@sim:prefill.status=503",
	"@sim:prefill.hang_headers",
	"@sim:prefill.slow_first_token=120",
	"@sim:prefill.refuse",
	"@sim:prefill.bad_descriptor=bad_blocks",
	"@sim:prefill.bad_descriptor=null",
	"@sim:prefill.wrong_engine_id",
}

var chaosInjected = []string{
	"decode.status=500", "decode.close_after=0", "decode.close_after=2", "decode.hang_first_token",
	"decode.done_first", "decode.refuse", "prefill.status=500", "prefill.refuse", "prefill.hang_headers",
	"prefill.bad_descriptor=missing_engine",
}

// chaosRequest is one request of the run and what its client saw.
type chaosRequest struct {
	id        string
	path      string
	stream    bool
	directive string
	hangUp    time.Duration // 0: the client stays to the end
	hangAfter int           // for streams: hang up after this many token events (when > 0)

	status   int // 0: no response before the hang-up
	body     []byte
	hungUp   bool
	clientOK bool // the exchange ended on its own (no hang-up took effect)
}

func TestChaos(t *testing.T) {
	const (
		requests    = 300
		concurrency = 12
		maxAttempts = 2
	)
	seed := uint64(time.Now().UnixNano())
	t.Logf("seed %d", seed)
	rng := rand.New(rand.NewPCG(seed, seed>>1))

	h := start(t, setup{prefill: 2, decode: 2, engine: sim.Options{Tokens: chaosTokens, ITL: time.Millisecond},
		config: configs(timeouts(0.3, 0.3, 0.2), deadline(1.5), maxInflight(4), func(c *config.Config) {
			c.Recovery.MaxAttempts = maxAttempts
			c.Recovery.RetryBudget = config.RetryBudget{Ratio: 0.5, MinPerS: 20, WindowS: 10}
			c.Recovery.EjectAfter = 1000
			c.Admission.QueueTimeoutS = 1
		})})

	reqs := make([]*chaosRequest, requests)
	for i := range reqs {
		r := &chaosRequest{id: newRequestID(t), path: "/v1/completions", stream: rng.IntN(4) != 0,
			directive: chaosDirectives[rng.IntN(len(chaosDirectives))]}
		if rng.IntN(2) == 0 {
			r.path = "/v1/chat/completions"
		}
		if rng.IntN(5) == 0 {
			r.hangUp = time.Duration(1+rng.IntN(400)) * time.Millisecond
			if r.stream && rng.IntN(2) == 0 {
				r.hangAfter = 1 + rng.IntN(chaosTokens)
			}
		}
		reqs[i] = r
	}
	injections := make([][2]string, (requests+7)/8)
	for i := range injections {
		injections[i] = [2]string{h.fleet.Engines[rng.IntN(len(h.fleet.Engines))].Name(), chaosInjected[rng.IntN(len(chaosInjected))]}
	}

	start := time.Now()
	var wg sync.WaitGroup
	next := make(chan int)
	for w := 0; w < concurrency; w++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range next {
				if i%8 == 0 {
					inj := injections[i/8]
					if err := h.fleet.Engine(inj[0]).InjectFault(inj[1], 1); err != nil {
						t.Error(err)
					}
				}
				h.runChaos(reqs[i])
			}
		}()
	}
	for i := range reqs {
		next <- i
	}
	close(next)
	wg.Wait()
	t.Logf("%d requests in %v", requests, time.Since(start))

	// Exactly one outcome per request: one access-log line each. A client that hung up before
	// the router had read its request was never admitted, and has none.
	eventually(t, 5*time.Second, func() bool { return h.srv.Router().InFlight() == 0 },
		func() string { return "requests still live after every client finished" })
	var mustLog []string
	for _, r := range reqs {
		if r.status != 0 || !r.hungUp {
			mustLog = append(mustLog, r.id)
		}
	}
	h.accessByID(mustLog...)
	// A line written after another is flushed with it or after it: once the line of a request
	// sent now appears, every line of the finished requests is in the log (a duplicate too).
	sentinel := h.send("/v1/completions", `{"model":"no-such-model","prompt":"x"}`)
	if sentinel.status != 404 {
		t.Fatalf("sentinel request: %d %s", sentinel.status, sentinel.body)
	}
	h.accessLine(sentinel.id)
	lines := map[string][]map[string]any{}
	sc := bufio.NewScanner(bytes.NewReader(h.access.Bytes()))
	sc.Buffer(nil, 1<<20)
	for sc.Scan() {
		var m map[string]any
		if err := json.Unmarshal(sc.Bytes(), &m); err != nil {
			t.Fatalf("access log line %q: %v", sc.Text(), err)
		}
		lines[str(m["request_id"])] = append(lines[str(m["request_id"])], m)
	}
	delete(lines, sentinel.id)
	if len(lines) > requests {
		t.Fatalf("%d requests logged, only %d sent", len(lines), requests)
	}

	outcomes := map[string]int{}
	for _, r := range reqs {
		ls := lines[r.id]
		if len(ls) == 0 && r.status == 0 && r.hungUp {
			outcomes["never admitted"]++
			continue
		}
		if len(ls) != 1 {
			t.Fatalf("request %s (%s): %d access-log lines", r.id, r.directive, len(ls))
		}
		l := ls[0]
		outcomes[str(l["outcome"])]++
		least := 1
		if str(l["outcome"]) == "rejected" {
			least = 0 // the last attempt was never placed, and it may have been the only one
		}
		if a := int(num(l["attempts"])); a < least || a > maxAttempts {
			t.Fatalf("request %s: %d attempts: %v", r.id, a, l)
		}
		checkChaosRequest(t, r, l)
	}
	t.Logf("outcomes %v", outcomes)
	if outcomes["success"] < requests/4 {
		t.Fatalf("only %d successes: the run did not exercise the fleet", outcomes["success"])
	}

	h.quiesced() // no engine leg outlives its request
	h.assertNoReservations()
}

// runChaos sends r, hanging up as planned, and records what the client saw.
func (h *harness) runChaos(r *chaosRequest) {
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	body := completion("tell me "+r.directive, r.stream)
	if strings.HasPrefix(r.path, "/v1/chat") {
		body = chat("tell me "+r.directive, r.stream)
	}
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, h.base+r.path, strings.NewReader(body))
	if err != nil {
		h.t.Error(err)
		return
	}
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("X-Request-Id", r.id)
	var timer *time.Timer
	if r.hangUp > 0 && r.hangAfter == 0 {
		timer = time.AfterFunc(r.hangUp, cancel)
		defer timer.Stop()
	}
	resp, err := h.client.Do(req)
	if err != nil {
		if ctx.Err() == nil {
			h.t.Errorf("request %s (%s): %v", r.id, r.directive, err)
		}
		r.hungUp = true
		return
	}
	defer resp.Body.Close()
	r.status = resp.StatusCode
	if r.hangAfter > 0 && resp.StatusCode == 200 {
		br := bufio.NewReader(resp.Body)
		for tokens := 0; tokens < r.hangAfter; {
			line, err := br.ReadBytes('\n')
			r.body = append(r.body, line...)
			if err != nil {
				break
			}
			if bytes.Contains(line, []byte(`"text":" `)) || bytes.Contains(line, []byte(`"content":" `)) {
				tokens++
			}
		}
		r.hungUp = true
		cancel()
		return
	}
	b, err := io.ReadAll(resp.Body)
	r.body = append(r.body, b...)
	if timer != nil && !timer.Stop() {
		r.hungUp = true
	}
	r.clientOK = err == nil && !r.hungUp
}

// checkChaosRequest checks one request's response against its access-log line.
func checkChaosRequest(t *testing.T, r *chaosRequest, l map[string]any) {
	t.Helper()
	fail := func(format string, args ...any) {
		t.Helper()
		t.Fatalf("request %s %s stream=%v %q: "+format+"\nbody %q\naccess %v",
			append(append([]any{r.id, r.path, r.stream, r.directive}, args...), r.body, l)...)
	}
	streamed := r.stream && r.status == 200
	if streamed {
		checkChaosStream(t, r.body, fail)
	}
	if !r.clientOK {
		// The hang-up may have come before or after the outcome; either way it is one outcome.
		if o := str(l["outcome"]); r.status == 0 && o == "success" && !r.hungUp {
			fail("no response but a success")
		}
		return
	}
	if got := int(num(l["status"])); got != r.status {
		fail("the client got %d, the access log says %d", r.status, got)
	}
	switch {
	case streamed:
		var ended string
		if bytes.HasSuffix(r.body, []byte("data: [DONE]\n\n")) {
			ended = "success"
		} else {
			ended = "stream_error"
		}
		if o := str(l["outcome"]); o != ended {
			fail("the stream ended as %s, the access log says %s", ended, o)
		}
	case r.status == 200:
		var resp struct {
			Choices []struct {
				Text    string `json:"text"`
				Message struct {
					Content string `json:"content"`
				} `json:"message"`
			} `json:"choices"`
		}
		if err := json.Unmarshal(r.body, &resp); err != nil || len(resp.Choices) != 1 {
			fail("not a completion: %v", err)
		}
		if got := resp.Choices[0].Text + resp.Choices[0].Message.Content; got != expectedText(chaosTokens) {
			fail("text %q, want %q", got, expectedText(chaosTokens))
		}
		if o := str(l["outcome"]); o != "success" {
			fail("outcome %s", o)
		}
	default:
		var env struct {
			Error *errorObject `json:"error"`
		}
		if err := json.Unmarshal(r.body, &env); err != nil || env.Error == nil || env.Error.Message == "" {
			fail("error %d without an error envelope", r.status)
		}
		switch r.status {
		case 400, 422, 500, 502, 503, 504:
		default:
			fail("unexpected status %d", r.status)
		}
	}
}

// checkChaosStream checks whatever part of a stream the client received: whole events only
// (a hang-up may cut the last one), tokens in order and never twice, at most one role delta,
// nothing after [DONE] or an error event, never both.
func checkChaosStream(t *testing.T, body []byte, fail func(string, ...any)) {
	t.Helper()
	var text strings.Builder
	var ended string
	roles := 0
	events := strings.Split(string(body), "\n\n")
	for i, ev := range events {
		if i == len(events)-1 {
			break // after the last separator: empty, or an event cut by the hang-up
		}
		if strings.HasPrefix(ev, ":") {
			continue
		}
		data, ok := strings.CutPrefix(ev, "data: ")
		if !ok {
			fail("not an SSE data event: %q", ev)
		}
		if ended != "" {
			fail("event %q after %s", data, ended)
		}
		switch {
		case data == "[DONE]":
			ended = "[DONE]"
		case strings.HasPrefix(data, `{"error":`):
			ended = "an error event"
		default:
			var c struct {
				Choices []struct {
					Text  string `json:"text"`
					Delta struct {
						Role    string `json:"role"`
						Content string `json:"content"`
					} `json:"delta"`
				} `json:"choices"`
			}
			if err := json.Unmarshal([]byte(data), &c); err != nil {
				fail("event %q: %v", data, err)
			}
			for _, ch := range c.Choices {
				text.WriteString(ch.Text + ch.Delta.Content)
				if ch.Delta.Role != "" {
					roles++
				}
			}
		}
	}
	if got := text.String(); !strings.HasPrefix(expectedText(chaosTokens), got) {
		fail("text %q is not a prefix of %q: a token was lost, reordered or sent twice", got, expectedText(chaosTokens))
	}
	if ended == "[DONE]" && text.String() != expectedText(chaosTokens) {
		fail("[DONE] after %q", text.String())
	}
	if roles > 1 {
		fail("%d role deltas", roles)
	}
}
