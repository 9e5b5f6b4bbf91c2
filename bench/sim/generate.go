package sim

import (
	"bytes"
	"context"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"net/http"
	"time"

	"github.com/google/uuid"
)

// maxBodyBytes bounds a generation request body.
const maxBodyBytes = 32 << 20

// generation is one completions or chat request being served: its latency model,
// its faults and its output.
type generation struct {
	e      *Engine
	ctx    context.Context // cancelled when the client goes away or the engine closes
	req    *genRequest
	faults faultPlan
	plan   outputPlan
	finish string
	shape  shape
	// choices are the shapes of every choice, choices[0] == shape (n > 1 streams one chunk
	// per choice and piece).
	choices []shape
	id      string // cmpl-<X-Request-Id> or chatcmpl-<X-Request-Id>
	created int64
	arrived time.Time
	timer   *time.Timer
	aborted bool
	loading bool   // counted in the scheduler's loading gauge until the first wait ends
	record  uint64 // the recorder's sequence number of this request
	// sse is the open event stream of a streaming decode; with a keepalive fault, waits
	// on it send comments.
	sse *sseWriter
	// sched is the scheduler of the data-parallel rank the generation runs on (ranks.go);
	// nil without the capacity model.
	sched *scheduler
	// seq is the generation inside the scheduler (capacity model only); handedOff says a
	// prefill leg's pin now owns its blocks.
	seq       *seq
	handedOff bool
	// transferred says the prompt's KV came from a producer (for cached_tokens without
	// the capacity model).
	transferred bool
	// pulledAt is when a Mooncake pull, which waits for its prefill, ended: the transfer's
	// time counts from then (mooncake.go). Zero for NIXL's read, made at arrival.
	pulledAt time.Time
}

func (e *Engine) serveGeneration(api endpoint) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		arrived := time.Now()
		body, err := io.ReadAll(io.LimitReader(r.Body, maxBodyBytes))
		if err != nil {
			e.recorded.add(newRecord(legNone, r, body, arrived))
			invalidRequest("", "cannot read the request body: "+err.Error()).write(w)
			return
		}
		req, apiErr := e.parseGeneration(api, r, body)
		if apiErr != nil {
			e.recorded.add(newRecord(legNone, r, body, arrived))
			apiErr.write(w)
			return
		}
		rk, apiErr := e.rankFor(r)
		if apiErr != nil {
			e.recorded.add(newRecord(legNone, r, body, arrived))
			apiErr.write(w)
			return
		}
		rk.requests.Add(1)
		g := e.newGeneration(r, req, arrived)
		g.sched = rk.sched
		g.record = e.recorded.add(newRecord(req.leg, r, body, arrived))
		g.serve(w)
	}
}

func (e *Engine) newGeneration(r *http.Request, req *genRequest, arrived time.Time) *generation {
	g := &generation{e: e, ctx: r.Context(), req: req, created: arrived.Unix(), arrived: arrived}
	rid := r.Header.Get("X-Request-Id")
	if rid == "" {
		u := uuid.New()
		rid = hex.EncodeToString(u[:]) // vLLM's random_uuid()
	}
	switch req.api {
	case chatAPI:
		g.id = "chatcmpl-" + rid
	case responsesAPI:
		g.id = "resp_" + rid
	default:
		g.id = "cmpl-" + rid
	}

	g.faults = newFaultPlan()
	e.faults.applyTo(&g.faults, req.leg)
	for _, f := range req.directives {
		g.faults.apply(f, req.leg)
	}

	switch {
	case req.leg == legPrefill:
		g.plan, g.finish = outputPlan{content: 1}, "length"
	default:
		room := e.opts.MaxModelLen - req.promptTokens
		n := min(e.opts.Tokens, room)
		g.finish = "stop" // the "model" ended on its own
		if req.maxTokens > 0 {
			n = min(n, req.maxTokens)
			if n == req.maxTokens {
				g.finish = "length"
			}
		} else if n == room {
			g.finish = "length"
		}
		g.plan = outputPlan{reasoning: g.faults.reasoning, toolCall: g.faults.toolCall, content: n}
		if g.plan.toolCall {
			g.finish = "tool_calls"
		}
	}
	switch req.api {
	case chatAPI:
		for c := range req.n {
			g.choices = append(g.choices, newChatShape(g, c))
		}
	case responsesAPI:
		g.plan = outputPlan{content: g.plan.content} // content only (responses.go)
		if g.finish == "tool_calls" {
			g.finish = "stop"
		}
		g.choices = []shape{newResponsesShape(g)}
	default:
		for c := range req.n {
			g.choices = append(g.choices, newCompletionShape(g, c))
		}
	}
	g.shape = g.choices[0]
	return g
}

func (g *generation) serve(w http.ResponseWriter) {
	e, f := g.e, &g.faults
	if g.req.leg == legPrefill {
		e.count.prefill.Add(1)
	} else {
		e.count.decode.Add(1)
	}
	e.count.inFlight.Add(1)
	defer func() {
		if g.timer != nil {
			g.timer.Stop()
		}
		if g.seq != nil && !g.handedOff {
			g.sched.release(g.seq)
		}
		if g.loading {
			g.sched.loadingDelta(-1)
		}
		e.count.inFlight.Add(-1)
		if !g.aborted {
			e.count.completed.Add(1)
		}
	}()

	if f.slowHeaders > 0 && !g.sleepUntil(g.arrived.Add(f.slowHeaders)) {
		return
	}
	switch {
	case f.refuse:
		refuse(w)
	case f.status != 0:
		simulatedError(f.status).write(w)
	case f.hangHeaders:
		g.hang()
	case g.req.leg == legPrefill:
		g.prefill(w)
	default:
		g.decode(w)
	}
}

// refuse closes the connection without a response.
func refuse(w http.ResponseWriter) {
	conn, _, err := http.NewResponseController(w).Hijack()
	if err != nil {
		panic(http.ErrAbortHandler) // closes the connection too
	}
	conn.Close()
}

// hang keeps the request open and silent (but for keep-alive comments) until the client
// goes away.
func (g *generation) hang() {
	if g.keepAliveDue().IsZero() {
		<-g.ctx.Done()
		g.abortIfClient()
		return
	}
	for g.sleepUntil(time.Now().Add(time.Hour)) {
	}
}

// keepAliveDue is when a waiting stream sends its next keep-alive comment; zero for none.
func (g *generation) keepAliveDue() time.Time {
	if g.sse == nil || g.faults.keepAlive <= 0 {
		return time.Time{}
	}
	return g.sse.last.Add(g.faults.keepAlive)
}

// abortIfClient counts the generation as aborted unless the engine itself is closing.
func (g *generation) abortIfClient() {
	if !g.aborted && g.e.ctx.Err() == nil {
		g.aborted = true
		g.e.count.lastAbort.Store(time.Now().UnixNano())
		g.e.count.aborted.Add(1)
	}
}

// sleepUntil waits until t and reports whether the client is still there. A stream with a
// keepalive fault sends its comments while it waits.
func (g *generation) sleepUntil(t time.Time) bool {
	for {
		wake, ping := t, false
		if due := g.keepAliveDue(); !due.IsZero() && due.Before(t) {
			wake, ping = due, true
		}
		if !g.wait(wake) {
			return false
		}
		if !ping {
			return true
		}
		if g.sse.comment("keep-alive") != nil {
			g.abortIfClient()
			return false
		}
	}
}

// wait sleeps until t and reports whether the client is still there.
func (g *generation) wait(t time.Time) bool {
	d := time.Until(t)
	if d <= 0 {
		if g.ctx.Err() != nil {
			g.abortIfClient()
			return false
		}
		return true
	}
	if g.timer == nil {
		g.timer = time.NewTimer(d)
	} else {
		g.timer.Reset(d)
	}
	select {
	case <-g.timer.C:
		return true
	case <-g.ctx.Done():
		g.abortIfClient()
		return false
	}
}

func (g *generation) prefillTime() time.Duration {
	return time.Duration(g.req.promptTokens) * g.e.opts.PrefillPerToken
}

// prefill serves a prefill leg: after the prefill time it pins the prompt's blocks
// and answers one token with the handoff descriptor. A client that leaves before
// that pins nothing.
func (g *generation) prefill(w http.ResponseWriter) {
	e, f := g.e, &g.faults
	if f.hangsBeforeOutput() {
		g.hang()
		return
	}
	if g.sched == nil {
		if !g.sleepUntil(g.arrived.Add(f.slowHeaders + e.opts.TTFT + g.prefillTime() + f.slow)) {
			return
		}
	} else {
		// The prompt is computed in the scheduler; the leg's one token ends it, and its
		// blocks stay held for the consumer.
		g.seq = newSeq(g.req.promptTokens, g.req.hashes, 1, false, true)
		g.seq.tokens, g.seq.keys = g.req.tokenIDs, g.req.keys
		if !g.waitFirst(g.arrived.Add(f.slowHeaders + e.opts.TTFT + f.slow)) {
			return
		}
	}
	if g.failInsteadOfResponse(w) {
		return
	}
	kv := []byte("null")
	if f.badDescriptor != badNull {
		// vLLM's internal request id: the response id, the prompt index (completions
		// only) and a random suffix.
		suffix := fmt.Sprintf("%08x", rand.Uint32())
		remoteID := g.id + "-" + suffix
		if g.req.api == completionsAPI {
			remoteID = g.id + "-0-" + suffix
		}
		var release func()
		if q := g.seq; q != nil {
			g.handedOff = true
			release = func() { g.sched.release(q) }
		}
		if tid, ok := mooncakeTransferID(g.req.kvParams); ok {
			e.pinTransfer(tid, g.req.promptTokens, release) // mooncake.go: no descriptor
		} else {
			groups := e.blocks.pin(remoteID, g.req.promptTokens, e.opts.KVLayout == KVLayoutGrouped, time.Now(), release)
			kv = g.appendDescriptor(nil, remoteID, groups)
		}
	}
	g.respond(w, kv)
}

// decode serves every generation that is not a prefill leg, loading the prompt's KV
// from its producer first when kv_transfer_params asks for it.
func (g *generation) decode(w http.ResponseWriter) {
	e, f := g.e, &g.faults
	computePrompt := true
	moved := 0 // KV blocks pulled from the producer
	if bytes.Equal(g.req.kvParams["do_remote_prefill"], []byte("true")) {
		n, err := g.loadKV()
		switch {
		case err == nil, errors.Is(err, errNothingToLoad):
			computePrompt, moved = false, n
			g.transferred = true
		case g.ctx.Err() != nil:
			g.abortIfClient()
			return
		default:
			e.count.kvLoadFailures.Add(1)
			if e.opts.KVLoadFailure == KVLoadFail {
				newError(http.StatusInternalServerError, "", "KV transfer failed: "+err.Error()).write(w)
				return
			}
		}
	}
	if g.sched != nil {
		g.seq = newSeq(g.req.promptTokens, g.req.hashes, g.plan.len(), !computePrompt, false)
		g.seq.tokens, g.seq.keys = g.req.tokenIDs, g.req.keys
		if moved > 0 {
			// vLLM pulls only the blocks its own prefix cache lacks.
			moved = max(moved-g.sched.cachedPrefix(g.req.hashes), 0)
		}
	}
	e.count.blocksLoaded.Add(int64(moved))
	first := g.arrived.Add(f.slowHeaders + e.opts.TTFT + f.slow)
	if g.pulledAt.After(first) {
		first = g.pulledAt
	}
	first = first.Add(time.Duration(moved) * e.opts.TransferPerBlock)
	if computePrompt && g.sched == nil {
		first = first.Add(g.prefillTime())
	}
	if g.sched != nil && moved > 0 {
		g.sched.loadingDelta(1)
		g.loading = true
	}
	if g.req.stream {
		g.stream(w, first)
		return
	}
	if f.hangsBeforeOutput() {
		g.hang()
		return
	}
	if !g.waitFirst(first) || !g.waitPiece(g.plan.len()-1, first) || g.failInsteadOfResponse(w) {
		return
	}
	g.respond(w, []byte("null"))
}

// loadKV reads the prompt's blocks from the producer and returns how many it sent.
func (g *generation) loadKV() (int, error) {
	if tid, ok := mooncakeTransferID(g.req.kvParams); ok {
		n, err := g.pullMooncake(tid)
		g.pulledAt = time.Now()
		return n, err
	}
	h, err := parseHandoff(g.req.kvParams)
	if err != nil {
		return 0, err
	}
	n, err := g.e.readRemoteBlocks(g.ctx, h)
	if err != nil {
		return 0, err
	}
	g.e.count.kvLoads.Add(1)
	return n, nil
}

// waitFirst waits for the first output piece: until first without the capacity model;
// with it, until first (the fixed delays and the KV transfer) and then for the
// scheduler to produce the sequence's first token.
func (g *generation) waitFirst(first time.Time) bool {
	ok := g.sleepUntil(first)
	if g.loading {
		g.loading = false
		g.sched.loadingDelta(-1)
	}
	if !ok {
		return false
	}
	if g.seq == nil {
		return true
	}
	g.sched.submit(g.seq)
	return g.waitProduced(1)
}

// waitPiece waits until output piece i (0-based) is due; piece 0 comes with waitFirst.
func (g *generation) waitPiece(i int, first time.Time) bool {
	if g.seq != nil {
		return g.waitProduced(i + 1)
	}
	if itl := g.e.opts.ITL; i > 0 && itl > 0 {
		return g.sleepUntil(first.Add(time.Duration(i) * itl))
	}
	if g.ctx.Err() != nil {
		g.abortIfClient()
		return false
	}
	return true
}

// waitProduced waits until the scheduler has produced n tokens of g's sequence, sending
// keep-alive comments meanwhile, and reports whether the client is still there.
func (g *generation) waitProduced(n int) bool {
	for {
		if produced, _ := g.sched.progress(g.seq); produced >= n {
			return true
		}
		var tick <-chan time.Time
		if due := g.keepAliveDue(); !due.IsZero() {
			if g.timer == nil {
				g.timer = time.NewTimer(time.Until(due))
			} else {
				g.timer.Reset(time.Until(due))
			}
			tick = g.timer.C
		}
		select {
		case <-g.seq.notify:
		case <-tick:
			if g.sse.comment("keep-alive") != nil {
				g.abortIfClient()
				return false
			}
		case <-g.ctx.Done():
			g.abortIfClient()
			return false
		}
	}
}

// cachedTokens is the prompt tokens the engine did not compute, as vLLM reports them in
// usage.prompt_tokens_details.cached_tokens: prefix-cache hits, and on a decode whose
// KV came from a producer every prompt token but the last (which vLLM recomputes).
func (g *generation) cachedTokens() int {
	if g.seq != nil {
		_, cached := g.sched.progress(g.seq)
		return cached
	}
	if g.transferred {
		return g.req.promptTokens - 1
	}
	return 0
}

// failInsteadOfResponse applies the stream-shaped faults to a response that cannot
// stream: close_after drops the connection, error_in_stream becomes the HTTP error,
// done_first an empty output. It reports whether the normal response is off.
func (g *generation) failInsteadOfResponse(w http.ResponseWriter) bool {
	f := &g.faults
	switch {
	case f.closeAfter >= 0:
		panic(http.ErrAbortHandler)
	case f.errorAfter >= 0:
		simulatedError(f.errorCode).write(w)
		return true
	case f.doneFirst:
		g.plan, g.finish = outputPlan{}, "stop"
		g.respond(w, []byte("null"))
		return true
	}
	return false
}

// respond writes the non-streaming body.
func (g *generation) respond(w http.ResponseWriter, kv []byte) {
	body := g.shape.appendResponse(make([]byte, 0, 1024), g.finish, kv)
	g.e.recorded.respond(g.record, body)
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(http.StatusOK)
	if _, err := w.Write(body); err != nil {
		g.abortIfClient()
	}
}

// stream writes the SSE response: headers at once (as uvicorn does), the first
// output at first, then one chunk per piece every ITL.
func (g *generation) stream(w http.ResponseWriter, first time.Time) {
	f := &g.faults
	s, err := startSSE(w)
	if err != nil {
		g.abortIfClient()
		return
	}
	g.sse = s
	if rs, ok := g.shape.(*responsesShape); ok && s.end(rs.appendOpen(s.begin())) != nil {
		g.abortIfClient()
		return
	}
	if f.hangFirstToken {
		g.hang()
		return
	}
	if !g.waitFirst(first) {
		return
	}
	for _, c := range g.choices {
		if b, ok := c.appendStart(s.begin()); ok {
			if s.end(b) != nil {
				g.abortIfClient()
				return
			}
		}
	}
	if f.doneFirst {
		g.end(g.done(s))
		return
	}
	n := g.plan.len()
	for i := 0; ; i++ {
		if g.interrupted(s, i) {
			return
		}
		if i == n {
			break
		}
		if !g.waitPiece(i, first) {
			return
		}
		finish := ""
		if i == n-1 && !g.plan.finishOnOwnChunk() {
			finish = g.finish
		}
		for _, c := range g.choices {
			if s.end(c.appendPiece(s.begin(), i, finish)) != nil {
				g.abortIfClient()
				return
			}
		}
	}
	if g.plan.finishOnOwnChunk() {
		for _, c := range g.choices {
			if s.end(c.appendFinish(s.begin(), g.finish)) != nil {
				g.abortIfClient()
				return
			}
		}
	}
	if g.req.includeUsage && s.end(g.shape.appendUsage(s.begin())) != nil {
		g.abortIfClient()
		return
	}
	g.end(g.done(s))
}

// interrupted applies the faults that cut a stream before piece i (i == the number
// of pieces means after the last one) and reports whether the stream is over.
func (g *generation) interrupted(s *sseWriter, i int) bool {
	f, n := &g.faults, g.plan.len()
	at := func(k int) bool { return k >= 0 && min(k, n) == i }
	switch {
	case at(f.errorAfter):
		// vLLM reports a failure inside a 200 stream as an error event, then [DONE].
		ev := simulatedError(f.errorCode).appendJSON(s.begin())
		if rs, ok := g.shape.(*responsesShape); ok {
			ev = rs.appendError(s.begin(), simulatedError(f.errorCode))
		}
		if s.end(ev) != nil {
			g.abortIfClient()
			return true
		}
		g.end(g.done(s))
		return true
	case at(f.silenceAfter):
		g.hang()
		return true
	case at(f.closeAfter):
		panic(http.ErrAbortHandler) // drops the connection without the final chunk
	}
	return false
}

// end records a failed final write as an abort.
func (g *generation) end(err error) {
	if err != nil {
		g.abortIfClient()
	}
}

// done ends a stream: [DONE], except on the Responses API, whose last event ends it.
func (g *generation) done(s *sseWriter) error {
	if g.req.api == responsesAPI {
		return nil
	}
	return s.done()
}
