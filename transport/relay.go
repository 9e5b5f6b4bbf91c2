package transport

import (
	"errors"
	"io"
	"sync"
	"time"

	"github.com/goccy/go-json"
	"github.com/valyala/fasthttp"
)

// ErrClientGone is the cause an exchange is cancelled with when its client went away: the
// relay uses it when a write fails, supervisors when the disconnect watcher fires.
var ErrClientGone = errors.New("client disconnected")

// relay copies a committed decode stream to a streaming client. fasthttp calls WriteTo on the
// connection's own goroutine after the handler returns, and frames every Write as one flushed
// HTTP chunk, so tokens go from the engine socket to the client socket with no goroutine, pipe or
// mailbox in between. Events are relayed byte for byte; consecutive events already buffered from
// the engine share one write.
type relay struct {
	in        *Ingress
	x         *Exchange
	s         *DecodeStream
	stopWatch func()

	end      StreamEnd
	closeOne sync.Once
}

func newRelay(in *Ingress, x *Exchange, s *DecodeStream, stopWatch func()) *relay {
	return &relay{in: in, x: x, s: s, stopWatch: stopWatch}
}

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
		// batch gathers events that arrived together; it is borrowed from a pool only while in
		// use, so a quiet stream holds no buffer of its own.
		batch *[]byte
	)
	write := func(p []byte) bool {
		n, err := w.Write(p)
		r.end.Bytes += int64(n)
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
			f, _ := AsFault(err)
			if f == nil {
				f = &Fault{Kind: FaultClosedEarly, Leg: LegDecode, Engine: r.s.Engine(), Detail: "stream failed", Err: err}
			}
			r.end.Fault = f
			if f.Kind == FaultCanceled && errors.Is(f.Err, ErrClientGone) {
				r.end.ClientGone = true
				break
			}
			if batch == nil {
				batch = relayBuffers.Get().(*[]byte)
			}
			if ev.Kind == EventError {
				*batch = append(*batch, ev.Raw...) // the engine's own error event, as it sent it
			} else {
				*batch = appendErrorEvent(*batch, f)
			}
			flush()
			break
		}
		switch ev.Kind {
		case EventToken:
			now := time.Now()
			if !lastToken.IsZero() {
				r.in.metrics.TokenGap(now.Sub(lastToken))
			}
			lastToken = now
			r.end.Events++
		case EventUsage:
			r.end.OutputTokens = usageCompletionTokens(usageOf(ev.Data), 0)
			if !includeUsage {
				continue
			}
		}
		more := r.s.Buffered() && ev.Kind != EventDone
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
		r.x.Abort(ErrClientGone) // closes the engine connection: the engine stops generating
	}
	if r.end.OutputTokens == 0 {
		r.end.OutputTokens = r.end.Events
	}
	r.in.metrics.TokensRelayed(endpoint, r.end.Events)
	return r.end.Bytes, werr
}

// Close runs when fasthttp is done with the response, written or not. It releases the engine
// stream and reports the outcome to the supervisor, exactly once.
func (r *relay) Close() error {
	r.closeOne.Do(func() {
		r.stopWatch()
		r.s.Close()
		r.end.Ended = time.Now()
		r.in.dispatcher.Finished(r.x, r.end)
	})
	return nil
}

var _ fasthttp.BodyWriterTo = (*relay)(nil)

// appendErrorEvent appends the terminal SSE error event for a failure after commit.
func appendErrorEvent(dst []byte, f *Fault) []byte {
	dst = append(dst, "data: "...)
	dst = AppendErrorEnvelope(dst, ErrorBody{Message: f.Detail, Type: errorType(f.ClientStatus()), Code: f.Kind.String()})
	return append(dst, "\n\n"...)
}

func usageOf(data []byte) json.RawMessage {
	var c struct {
		Usage json.RawMessage `json:"usage"`
	}
	_ = json.Unmarshal(data, &c)
	return c.Usage
}

// usageCompletionTokens reads completion_tokens from a usage object, or returns fallback.
func usageCompletionTokens(usage json.RawMessage, fallback int) int {
	if len(usage) == 0 {
		return fallback
	}
	var u struct {
		CompletionTokens *int `json:"completion_tokens"`
	}
	if err := json.Unmarshal(usage, &u); err != nil || u.CompletionTokens == nil {
		return fallback
	}
	return *u.CompletionTokens
}
