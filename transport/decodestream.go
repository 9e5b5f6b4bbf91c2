package transport

import (
	"context"
	"errors"
	"fmt"
	"io"
	"time"

	"github.com/valyala/fasthttp"

	"github.com/narwhal-router/narwhal/transport/fault"
	"github.com/narwhal-router/narwhal/transport/wire"
)

// Event is one SSE event of a decode stream.
type Event struct {
	// Raw is the event's bytes, terminating blank line included, ready to relay. Raw and Data
	// are valid until the next call to Next.
	Raw  []byte
	Data []byte
	Kind wire.EventKind
}

// DecodeStream is an open decode leg whose first generated token has arrived. Events held
// before commit (metadata and the first token) come out of Next first, then the live stream.
// Only one goroutine may use a DecodeStream; cancelling the context Decode got aborts it from
// anywhere.
type DecodeStream struct {
	ctx      context.Context
	c        *EngineClient
	lc       *legConn
	resp     *fasthttp.Response
	body     streamBody
	sse      wire.EventReader
	deadline time.Time

	// FirstTokenAt is when the first generated token arrived.
	FirstTokenAt time.Time

	held     []byte
	heldEnds []int
	heldKind []wire.EventKind
	// endsBuf and kindBuf hold the first few held events' bookkeeping without an allocation
	// (normally two events are held: the role delta and the first token).
	endsBuf  [4]int
	kindBuf  [4]wire.EventKind
	heldNext int
	// comments and commentBytes count the comments held (they are not held past
	// maxHeldComments bytes and do not count toward engine.max_held_*).
	comments, commentBytes int
	done                   bool
	closed                 bool

	// The silence watchdog (engine.decode_read_timeout_s) is the connection's read deadline,
	// moved only when the last move is silenceSlack old (armedAt), not on every event; armedBy
	// says whether the deadline in force is the request's. lastRead is when the latest event
	// came in.
	armedAt, lastRead time.Time
	armedBy           bool
}

// silenceSlack is how stale the silence deadline may get before Next moves it: the deadline is
// set slack past the timeout, so silence is detected after at least decode_read_timeout_s and at
// most that plus the slack (1/16 of the timeout, at most 250 ms) — never early — for one
// deadline update (a runtime timer change) per slack instead of one per token.
func silenceSlack(timeout time.Duration) time.Duration { return min(timeout/16, 250*time.Millisecond) }

// maxHeldComments bounds the SSE comments held before the first token.
const maxHeldComments = 1 << 10

// newDecodeStream reads the events of resp's body straight out of the engine connection's
// reader (streambody.go): no buffer of the stream's own.
func newDecodeStream(ctx context.Context, c *EngineClient, lc *legConn, resp *fasthttp.Response, deadline time.Time) *DecodeStream {
	s := &DecodeStream{ctx: ctx, c: c, lc: lc, resp: resp, deadline: deadline}
	contentLength := resp.Header.ContentLength()
	if status := resp.StatusCode(); status == fasthttp.StatusNoContent || status == fasthttp.StatusNotModified {
		contentLength = 0
	}
	s.body.reset(lc.br, contentLength)
	s.sse = wire.NewEventReader(&s.body)
	s.heldEnds, s.heldKind = s.endsBuf[:0], s.kindBuf[:0]
	return s
}

// heldInitial is the first allocation for held events: room for a role delta and a first
// token of usual size, so holding them costs one allocation (released at commit).
const heldInitial = 512

// Engine is the name of the engine serving the stream.
func (s *DecodeStream) Engine() string { return s.c.name }

// awaitFirstToken reads until the first generated token, holding the events before it: what is
// held is bounded by engine.max_held_bytes and engine.max_held_events, so an
// engine that floods events before its first token costs a bounded amount of memory and fails
// its leg (HeldOverflow) instead of growing the router until the first-token timeout.
func (s *DecodeStream) awaitFirstToken(deadline time.Time, byRequest bool) error {
	for {
		ev, err := s.sse.Next()
		if err != nil {
			return s.readFault(err, true, byRequest)
		}
		data := wire.EventData(ev)
		if data == nil {
			// A comment (keep-alive) or an event without data. The first maxHeldComments bytes of
			// them are held and relayed like any event; the rest are dropped, so a flood of
			// keep-alives costs nothing and a slow engine's keep-alives never fail its leg.
			if s.commentBytes+len(ev) <= maxHeldComments {
				s.hold(ev, wire.EventMeta)
				s.commentBytes += len(ev)
				s.comments++
			}
			continue
		}
		if len(s.held)-s.commentBytes+len(ev) > s.c.timeouts.MaxHeldBytes || len(s.heldEnds)-s.comments >= s.c.timeouts.MaxHeldEvents {
			return s.c.fault(fault.PhaseDecode, fault.HeldOverflow, fmt.Sprintf(
				"decode engine sent more than %d events or %d bytes before its first token",
				s.c.timeouts.MaxHeldEvents, s.c.timeouts.MaxHeldBytes), nil)
		}
		switch kind := wire.Classify(data); kind {
		case wire.EventDone:
			return s.c.fault(fault.PhaseDecode, fault.DoneBeforeToken, "stream ended with [DONE] before any token arrived", nil)
		case wire.EventError:
			return s.streamFault(data)
		case wire.EventToken:
			s.hold(ev, kind)
			s.FirstTokenAt = time.Now()
			s.lastRead = s.FirstTokenAt
			return nil
		default:
			s.hold(ev, kind)
		}
	}
}

func (s *DecodeStream) hold(ev []byte, kind wire.EventKind) {
	if s.held == nil {
		s.held = make([]byte, 0, max(heldInitial, len(ev)))
	}
	s.held = append(s.held, ev...)
	s.heldEnds = append(s.heldEnds, len(s.held))
	s.heldKind = append(s.heldKind, kind)
}

// Next returns the next event. After EventDone it returns io.EOF, and only then: an error event
// is returned together with its Fault, and any other failure (silence, a close or an orderly end
// of the body before [DONE], cancellation) comes back as a *fault.Fault with no event. A Fault
// never satisfies errors.Is(err, io.EOF), so testing for io.EOF tells the end from a failure.
func (s *DecodeStream) Next() (Event, error) {
	if s.heldNext < len(s.heldEnds) {
		start := 0
		if s.heldNext > 0 {
			start = s.heldEnds[s.heldNext-1]
		}
		raw := s.held[start:s.heldEnds[s.heldNext]]
		kind := s.heldKind[s.heldNext]
		s.heldNext++
		return Event{Raw: raw, Data: wire.EventData(raw), Kind: kind}, nil
	}
	if s.held != nil { // every held event was returned (and the last is no longer in use)
		s.held, s.heldEnds, s.heldKind = nil, nil, nil
	}
	if s.done {
		return Event{}, io.EOF
	}
	// Silence counts from the last event read (one clock reading per event, taken after each
	// read, serves the watchdog and the relay's inter-token histogram alike).
	now := s.lastRead
	if now.IsZero() {
		now = time.Now()
	}
	if s.armedAt.IsZero() || now.Sub(s.armedAt) >= s.rearmEvery() {
		readDeadline, byRequest := s.deadline, true
		if rt := s.c.timeouts.DecodeReadTimeoutS.Duration(); rt > 0 {
			readDeadline, byRequest = earliest(now.Add(rt+silenceSlack(rt)), s.deadline)
		}
		if err := s.lc.setReadDeadline(readDeadline); err != nil {
			return Event{}, s.readFault(err, false, byRequest)
		}
		s.armedAt, s.armedBy = now, byRequest
	}
	ev, err := s.sse.Next()
	s.lastRead = time.Now()
	if err != nil {
		return Event{}, s.readFault(err, false, s.armedBy)
	}
	data := wire.EventData(ev)
	kind := wire.ClassifyFast(data)
	switch kind {
	case wire.EventDone:
		s.done = true
	case wire.EventError:
		s.done = true
		return Event{Raw: ev, Data: data, Kind: kind}, s.streamFault(data)
	}
	return Event{Raw: ev, Data: data, Kind: kind}, nil
}

// rearmEvery is how often Next moves the read deadline: every silenceSlack with a silence
// timeout, never again (the request deadline does not move) without one.
func (s *DecodeStream) rearmEvery() time.Duration {
	if rt := s.c.timeouts.DecodeReadTimeoutS.Duration(); rt > 0 {
		return silenceSlack(rt)
	}
	return 1<<63 - 1
}

// LastRead is when the event Next returned last came off the engine connection (the held
// events before commit: when the stream committed).
func (s *DecodeStream) LastRead() time.Time { return s.lastRead }

// Buffered reports whether the next event is already in memory (held, or whole in the engine
// connection's buffer), so a relay can batch it into the same client write without waiting.
func (s *DecodeStream) Buffered() bool {
	return s.heldNext < len(s.heldEnds) || s.body.eventBuffered()
}

func (s *DecodeStream) streamFault(data []byte) *fault.Fault {
	se := wire.ParseStreamError(data)
	return &fault.Fault{Kind: fault.StreamError, Phase: fault.PhaseDecode, Engine: s.c.name, Status: se.Status,
		Body: fault.AppendEnvelope(nil, se.Body), Detail: se.Message}
}

func (s *DecodeStream) readFault(err error, beforeFirst, byRequest bool) *fault.Fault {
	c := s.c
	switch {
	case s.ctx.Err() != nil:
		return fault.FromContext(s.ctx, c.name, fault.PhaseDecode)
	case isTimeout(err) && byRequest:
		return c.fault(fault.PhaseDecode, fault.Deadline, "the request deadline passed during the decode leg", err)
	case isTimeout(err) && beforeFirst:
		return c.fault(fault.PhaseDecode, fault.FirstTokenTimeout, c.firstTokenDetail(), err)
	case isTimeout(err):
		return c.fault(fault.PhaseDecode, fault.Silence, "engine went silent between tokens (nothing for "+
			c.timeouts.DecodeReadTimeoutS.Duration().String()+")", err)
	case errors.Is(err, wire.ErrEventTooLarge), errors.Is(err, errBadChunk):
		return c.fault(fault.PhaseDecode, fault.BadResponse, err.Error(), err)
	}
	return c.fault(fault.PhaseDecode, fault.ClosedEarly, "stream closed before [DONE]", err)
}

// readAll reads the rest of the body, up to limit bytes (for error responses).
func (s *DecodeStream) readAll(limit int) ([]byte, error) {
	b, err := io.ReadAll(io.LimitReader(&s.body, int64(limit)))
	if err == nil && len(b) < limit {
		s.lc.bodyDone = true
	}
	return b, err
}

// Close releases the stream. A stream that ended with [DONE] has its connection pooled again
// once the engine's end of body arrives (waited for briefly); any other is closed, which tells
// the engine to stop generating.
func (s *DecodeStream) Close() {
	if s.closed {
		return
	}
	s.closed = true
	if s.done && s.ctx.Err() == nil {
		if err := s.lc.setReadDeadline(time.Now().Add(50 * time.Millisecond)); err == nil {
			var tmp [64]byte
			for {
				if _, err := s.body.Read(tmp[:]); err != nil {
					s.lc.bodyDone = errors.Is(err, io.EOF)
					break
				}
			}
		}
	}
	s.lc.close()
	s.body = streamBody{}
	fasthttp.ReleaseResponse(s.resp)
}
