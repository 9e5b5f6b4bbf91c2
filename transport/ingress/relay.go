package ingress

import (
	"bytes"
	"errors"
	"io"
	"sync"
	"time"

	"github.com/valyala/fasthttp"

	"github.com/narwhal-router/narwhal/transport"
	"github.com/narwhal-router/narwhal/transport/fault"
	"github.com/narwhal-router/narwhal/transport/wire"
)

// relay copies a committed decode stream to a streaming client. fasthttp calls WriteTo on the
// connection's own goroutine after the handler returns, and frames every Write as one flushed
// HTTP chunk, so tokens go from the engine socket to the client socket with no goroutine, pipe or
// mailbox in between. Events are relayed byte for byte; consecutive events already buffered from
// the engine share one write.
type relay struct {
	in    *Ingress
	ctx   *fasthttp.RequestCtx
	x     *Exchange
	s     *transport.DecodeStream
	watch goneWatch
	// msgs translates the chat stream into the Messages API's events (nil for other endpoints).
	msgs *wire.MessagesStream

	end          StreamFinished
	writeArmedAt time.Time // when armWrite last moved the client write deadline
	events       int       // token events relayed
	sent         int       // events relayed (the Responses API numbers them)
	written      int64     // bytes written to the client
	closeOne     sync.Once
}

func newRelay(in *Ingress, ctx *fasthttp.RequestCtx, x *Exchange, s *transport.DecodeStream, watch goneWatch) *relay {
	r := &relay{in: in, ctx: ctx, x: x, s: s, watch: watch}
	if x.Body.Endpoint == wire.EndpointMessages {
		r.msgs = wire.NewMessagesStream()
	}
	return r
}

// armWrite bounds the next client write: server.client_write_timeout_s, and never more than
// deadlineGrace past the request deadline, so a client that stops reading is cut off (its engine
// leg aborted, its slots released) soon after the deadline at the latest. The grace lets the
// terminal error event of a stream the deadline ended reach a client that is reading; that last
// write (final) gets the grace alone. Like the engine side's silence watchdog, the deadline moves
// only once per writeSlack and is set that much later: every write may block for at least the
// timeout and at most the slack more, for one runtime timer change per slack, not per token.
//
// Whether the deadline is due to move is judged by the stream's last read time
// (DecodeStream.LastRead, taken right after the read that brought the event being written), so
// a token costs no clock reading here; a deadline that moves is set from a fresh one. (A write
// that does not move it may block the timeout less the moments since that read: microseconds.)
func (r *relay) armWrite(final bool) {
	wt := r.in.rt.ClientWriteTimeoutS.Duration()
	if final {
		_ = r.ctx.SetWriteDeadline(time.Now().Add(min(wt, deadlineGrace)))
		r.writeArmedAt = time.Time{}
		return
	}
	slack := writeSlack(wt)
	if last := r.s.LastRead(); !r.writeArmedAt.IsZero() && !last.IsZero() && last.Sub(r.writeArmedAt) < slack {
		return
	}
	now := time.Now()
	d := now.Add(wt + slack)
	if limit := r.x.Deadline.Add(deadlineGrace); limit.Before(d) {
		d = limit
	}
	_ = r.ctx.SetWriteDeadline(d)
	r.writeArmedAt = now
}

// writeSlack is how stale the client write deadline may get: 1/16 of the timeout, at most 250 ms.
func writeSlack(timeout time.Duration) time.Duration { return min(timeout/16, 250*time.Millisecond) }

// deadlineGrace is how long past the request deadline a client write may still block.
const deadlineGrace = time.Second

// SupportsBodyWriteTo makes fasthttp use WriteTo (fasthttp.BodyWriterTo).
func (r *relay) SupportsBodyWriteTo() bool { return true }

// Read is never used: fasthttp prefers WriteTo. It exists to satisfy io.Reader.
func (r *relay) Read([]byte) (int, error) { return 0, io.EOF }

var relayBuffers = sync.Pool{New: func() any { b := make([]byte, 0, 8192); return &b }}

// flushAt is the batch size past which the relay writes even if more is buffered.
const flushAt = 16 << 10

// WriteTo relays the stream until [DONE], an error event, a failure or a client hang-up. After
// any failure the client gets exactly one terminal error event and no [DONE].
func (r *relay) WriteTo(w io.Writer) (int64, error) {
	includeUsage := r.x.Body.IncludeUsage
	endpoint := r.x.Body.Endpoint.String()
	var (
		lastToken time.Time
		werr      error
		finishing bool // a finish_reason came: hold it for [DONE]
		// batch gathers events that arrived together; it is borrowed from a pool only while in
		// use, so a quiet stream holds no buffer of its own.
		batch *[]byte
	)
	write := func(p []byte) bool {
		r.armWrite(r.end.Fault != nil)
		n, err := w.Write(p)
		r.written += int64(n)
		werr = err
		return err == nil
	}
	flush := func() bool {
		ok := write(*batch)
		*batch = (*batch)[:0]
		relayBuffers.Put(batch)
		batch = nil
		return ok
	}
	for {
		ev, err := r.s.Next()
		if err != nil {
			if errors.Is(err, io.EOF) {
				break // after [DONE]
			}
			f, _ := fault.As(err)
			if f == nil {
				f = &fault.Fault{Kind: fault.ClosedEarly, Phase: fault.PhaseDecode, Engine: r.s.Engine(), Detail: "stream failed", Err: err}
			}
			r.end.Fault = f
			if f.Kind == fault.Canceled && errors.Is(f.Err, fault.ErrClientGone) {
				r.end.ClientGone = true
				break
			}
			if batch == nil {
				batch = relayBuffers.Get().(*[]byte)
			}
			// ev.Raw is the engine's own error event when the stream failed with one (Next), else nil
			if r.msgs != nil { // the chat stream's terminal event, in Anthropic's shape
				*batch = wire.AppendMessagesErrorEvent(*batch, f.ClientStatus(),
					fault.AppendTerminalEvent(nil, f, wire.EndpointChat, r.sent, r.x.live.exposeErrors, ev.Raw))
			} else {
				*batch = fault.AppendTerminalEvent(*batch, f, r.x.Body.Endpoint, r.sent, r.x.live.exposeErrors, ev.Raw)
			}
			flush()
			break
		}
		r.sent++
		switch ev.Kind {
		case wire.EventToken:
			now := r.s.LastRead()
			if !lastToken.IsZero() {
				r.in.metrics.TokenGap(now.Sub(lastToken))
			}
			lastToken = now
			r.events++
		case wire.EventDone: // a Responses stream's last event carries its usage
			if t, ok := wire.TokensOf(ev.Data); ok {
				r.x.countTokens(&r.end, t)
				ev.Raw = r.x.CorrectUsage(ev.Raw)
			}
		case wire.EventUsage:
			t, _ := wire.TokensOf(ev.Data)
			r.x.countTokens(&r.end, t)
			if !includeUsage {
				continue
			}
			ev.Raw = r.x.CorrectUsage(ev.Raw)
		}
		if r.msgs != nil {
			ev.Raw = r.msgs.Event(ev.Kind, ev.Data, wire.Tokens{Prompt: r.end.PromptTokens, Completion: r.end.OutputTokens, Cached: r.end.CachedTokens})
			if len(ev.Raw) == 0 {
				continue
			}
		}
		// The event that finishes a choice is normally followed at once by the usage event and
		// [DONE]: it waits for them (bounded by the silence watchdog) so that they leave in one
		// write, not two. (The chunked terminator is one more write: fasthttp flushes every chunk
		// WriteTo writes, and writes the terminator after it returns.) Any other event after it
		// (another choice's token, n > 1) ends the wait at once. Never the first token — the
		// first byte is not delayed — which is the finishing one of a 1-token answer.
		hold := false
		switch {
		case ev.Kind == wire.EventToken && !finishing && r.events > 1 && finishes(ev.Data):
			finishing, hold = true, true
		case finishing && ev.Kind == wire.EventUsage:
			hold = true
		default:
			finishing = false
		}
		more := (r.s.Buffered() || hold) && ev.Kind != wire.EventDone
		if batch == nil && !more {
			if !write(ev.Raw) { // the common case: one event, straight from the read buffer
				break
			}
			continue
		}
		if batch == nil {
			batch = relayBuffers.Get().(*[]byte)
		}
		*batch = append(*batch, ev.Raw...)
		if more && len(*batch) < flushAt {
			continue
		}
		finishing = false // flushed: anything after goes out as it comes
		if !flush() {
			break
		}
	}
	if batch != nil {
		*batch = (*batch)[:0]
		relayBuffers.Put(batch)
	}
	if werr != nil {
		r.end.ClientGone = true
		r.x.Abort(fault.ErrClientGone) // closes the engine connection: the engine stops generating
	}
	if r.end.OutputTokens == 0 {
		r.end.OutputTokens = r.events
	}
	r.in.metrics.TokensRelayed(endpoint, r.events)
	return r.written, werr
}

// finishes reports whether a token event's data carries a finish reason (a string, not null).
func finishes(data []byte) bool { return bytes.Contains(data, finishReason) }

var finishReason = []byte(`"finish_reason":"`)

// Close runs when fasthttp is done with the response, written or not. It releases the engine
// stream and reports the outcome to the supervisor, exactly once.
func (r *relay) Close() error {
	r.closeOne.Do(func() {
		r.watch.stop()
		r.s.Close()
		r.end.Ended = time.Now()
		r.in.dispatcher.Finished(r.x, &r.end)
		status := fasthttp.StatusOK
		if r.end.ClientGone {
			status = 0
		}
		r.x.endTrace(status, &r.end)
	})
	return nil
}

var _ fasthttp.BodyWriterTo = (*relay)(nil)
