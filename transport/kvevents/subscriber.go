package kvevents

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/go-zeromq/zmq4"
)

// Subscriber follows one engine's KV event stream: a SUB socket on the engine's PUB endpoint
// and, to fill gaps, a DEALER on its replay endpoint. Handle sees every batch it can get in
// sequence order, each once; what a gap loses for good (no replay endpoint, or the engine's
// buffer no longer has it) is reported to Gap, after which an exact index must start over.
type Subscriber struct {
	// Endpoint is the engine's PUB endpoint (tcp://host:port); Replay its ROUTER replay
	// endpoint, "" for none.
	Endpoint, Replay string
	// Topic filters by prefix of the topic frame; "" takes every topic.
	Topic string
	// From, when set, is the first sequence number wanted: a subscriber that resumes after
	// a restart asks for everything since the last batch it had. Without it, the first
	// batch received starts the stream (as vLLM's example subscriber does).
	From *uint64
	// ReplayTimeout bounds one replay (default 2 s).
	ReplayTimeout time.Duration
	// Handle receives every batch in order. It runs on Run's goroutine.
	Handle func(seq uint64, b Batch)
	// Gap, if set, is told of batches first…last that could not be had.
	Gap func(first, last uint64)
	// Restart, if set, is told when the stream's numbers go back after a batch was received
	// live: the publisher restarted (its numbers count from 0 again) and what it said before
	// no longer holds. The stream goes on with the new numbering from 0 (what the new
	// publisher sent before seq, the batch that showed the restart, is asked of the replay).
	Restart func(seq uint64)
}

// Run subscribes and delivers batches until ctx ends (it then returns nil) or the stream
// fails. A payload that does not decode is an error: the index it feeds would be wrong. An
// error that wraps ErrHostile is the publisher's doing (a frame, message or batch over the
// bounds, or one that does not parse); the connection is closed before anything is allocated
// for what it claimed.
func (s *Subscriber) Run(ctx context.Context) error {
	sub := zmq4.NewSub(ctx)
	defer sub.Close()
	if err := sub.SetOption(zmq4.OptionSubscribe, s.Topic); err != nil {
		return fmt.Errorf("kvevents: subscribe %q: %w", s.Topic, err)
	}
	endpoint, err := boundedEndpoint(s.Endpoint)
	if err != nil {
		return err
	}
	if err := sub.Dial(endpoint); err != nil {
		return fmt.Errorf("kvevents: dial %s: %w", s.Endpoint, err)
	}
	next, started, live := uint64(0), false, false
	if s.From != nil {
		next, started = *s.From, true
	}
	for {
		msg, err := sub.Recv()
		if err != nil {
			if ctx.Err() != nil {
				return nil
			}
			return fmt.Errorf("kvevents: receive from %s: %w", s.Endpoint, err)
		}
		m, err := ParseMessage(msg.Frames)
		if err != nil {
			return fmt.Errorf("%w: %s: %w", ErrHostile, s.Endpoint, err)
		}
		if !started {
			next, started = m.Seq, true
		}
		if m.Seq < next && live {
			// The live stream is in order and a replay delivers only what came before the batch
			// that started it: a number lower than one already received live is a new
			// publisher's.
			if s.Restart != nil {
				s.Restart(m.Seq)
			}
			next = 0
		}
		if m.Seq < next {
			continue // already had it (asked for From on)
		}
		live = true
		if m.Seq > next {
			if err := s.fill(ctx, next, m.Seq); err != nil {
				return err
			}
		}
		b, err := DecodeBatch(m.Payload)
		if err != nil {
			return fmt.Errorf("%w: batch %d from %s: %w", ErrHostile, m.Seq, s.Endpoint, err)
		}
		s.Handle(m.Seq, b)
		next = m.Seq + 1
	}
}

// fill asks the replay endpoint for batches from..upto−1 and delivers them. What it cannot
// get goes to Gap; without a Gap, a failed replay is an error.
func (s *Subscriber) fill(ctx context.Context, from, upto uint64) error {
	next := from
	if s.Replay != "" {
		var err error
		// A hostile replay endpoint ends the stream too; any other failure is a gap.
		if next, err = s.replay(ctx, from, upto); err != nil && ctx.Err() == nil && (s.Gap == nil || errors.Is(err, ErrHostile)) {
			return err
		}
	}
	if next < upto && s.Gap != nil {
		s.Gap(next, upto-1)
	}
	return nil
}

// replay delivers what the replay endpoint still has of from..upto−1 and returns the
// sequence number after the last one delivered.
func (s *Subscriber) replay(ctx context.Context, from, upto uint64) (uint64, error) {
	timeout := s.ReplayTimeout
	if timeout <= 0 {
		timeout = 2 * time.Second
	}
	rctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	dealer := zmq4.NewDealer(rctx)
	defer dealer.Close()
	endpoint, err := boundedEndpoint(s.Replay)
	if err != nil {
		return from, err
	}
	if err := dealer.Dial(endpoint); err != nil {
		return from, fmt.Errorf("kvevents: dial replay %s: %w", s.Replay, err)
	}
	if err := dealer.SendMulti(zmq4.NewMsgFrom(ReplayRequest(from)...)); err != nil {
		return from, fmt.Errorf("kvevents: replay request to %s: %w", s.Replay, err)
	}
	next := from
	for next < upto {
		msg, err := dealer.Recv()
		if err != nil {
			if errors.Is(rctx.Err(), context.DeadlineExceeded) {
				return next, fmt.Errorf("kvevents: replay from %s: no end marker within %v", s.Replay, timeout)
			}
			return next, fmt.Errorf("kvevents: replay from %s: %w", s.Replay, err)
		}
		seq, payload, end, err := ParseReplayReply(msg.Frames)
		if err != nil {
			return next, fmt.Errorf("%w: %s: %w", ErrHostile, s.Replay, err)
		}
		if end {
			return next, nil
		}
		if seq < next || seq >= upto {
			continue // before the gap, or the live stream has it
		}
		if seq > next && s.Gap != nil {
			s.Gap(next, seq-1) // the buffer had already dropped these
		}
		b, err := DecodeBatch(payload)
		if err != nil {
			return next, fmt.Errorf("%w: replayed batch %d from %s: %w", ErrHostile, seq, s.Replay, err)
		}
		s.Handle(seq, b)
		next = seq + 1
	}
	return next, nil
}

// Result names how a stream whose Run returned err ended, as the kv_events metric counts it:
// "hostile" (the publisher sent what no vLLM sends: err wraps ErrHostile) or "error".
func Result(err error) string {
	if errors.Is(err, ErrHostile) {
		return "hostile"
	}
	return "error"
}
