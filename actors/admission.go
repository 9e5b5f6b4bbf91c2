package actors

import (
	"fmt"
	"time"

	"github.com/asynkron/protoactor-go/actor"

	"github.com/narwhal-router/narwhal/messages"
	"github.com/narwhal-router/narwhal/transport/fault"
)

// await queues the request until an engine frees a slot, bounded by admission.queue_timeout_s
// and the request deadline.
func (s *requestSupervisor) await(ctx actor.Context) {
	if s.set.request.MaxQueue == 0 {
		s.reject(ctx, 503, "no engine has room for the request", "no_capacity")
		return
	}
	// admission.queue_timeout_s bounds the whole wait of a placement round: a request woken
	// that could not take the slot waits on for what is left of it, not for a fresh timeout.
	first := s.queuedSince.IsZero()
	if first {
		s.queuedSince = time.Now()
	}
	wait := min(s.set.request.QueueTimeout-time.Since(s.queuedSince), time.Until(s.x.Deadline))
	if t := s.bandTarget(); !t.IsZero() {
		wait = min(wait, time.Until(t))
	}
	if wait <= 0 {
		if first {
			s.reject(ctx, 503, "no engine has room for the request", "no_capacity")
		} else {
			s.stage = stageQueued
			s.timedOut(ctx)
		}
		return
	}
	s.stage = stageQueued
	f := s.x.Flow
	ctx.Request(s.env.pool, &messages.AwaitCapacity{Model: s.x.Body.Model, Front: s.frontOfQ,
		Tenant: f.Tenant, Label: f.Label, Weight: f.Weight, Band: f.Band, BandName: f.BandName,
		Cost: s.expectedTokens(), Arrival: s.x.Arrival, Deadline: s.x.Deadline,
		Full: append([]string(nil), s.full...)})
	s.full = s.full[:0]
	self, root := s.self, s.env.root
	s.queueTimer = time.AfterFunc(wait, func() { root.Send(self, &messages.QueueTimeout{}) })
}

// onCapacityAvailable tries placement again for a queued request an engine woke; a request that
// loses the race for the slot keeps its place at the front of the queue.
func (s *requestSupervisor) onCapacityAvailable(ctx actor.Context, m *messages.CapacityAvailable) {
	if s.stage == stageQueued {
		s.stopQueueTimer()
		s.frontOfQ = true
		s.place(ctx) // took a slot, or is back in the queue (AwaitCapacity sent), or answered
	}
	if m.Engine != "" {
		ctx.Request(s.env.pool, &messages.WakeSettled{}) // a Request: the pool finds the promise by its sender
	}
}

// onQueueFull answers a request the queue refused or gave up, by flow_control's rule.
func (s *requestSupervisor) onQueueFull(ctx actor.Context, m *messages.QueueFull) {
	if s.stage != stageQueued {
		return
	}
	s.stopQueueTimer()
	switch m.Reason {
	case "shed":
		s.reject(ctx, 503, fmt.Sprintf("no engine has room, and requests of band %q are shed first under load", s.x.Flow.BandName), "shed")
	case "tenant_queue_full":
		s.reject(ctx, 429, "no engine has room and this tenant already has flow_control.max_queued_per_tenant requests waiting", "tenant_queue_full")
	case "deadline_unmeetable":
		s.reject(ctx, 503, "no engine has room, and at the rate the admission queue drains the request would not get one before its deadline", "deadline_unmeetable")
	default:
		s.reject(ctx, 503, "no engine has room and the admission queue is full", "queue_full")
	}
}

// expectedTokens is the request's estimated cost for the admission queue: its prompt tokens
// plus its output bound, or flow_control.default_output_tokens without one.
func (s *requestSupervisor) expectedTokens() int64 {
	out, ok := s.x.Body.OutputLimit()
	if !ok {
		out = int64(s.set.defaultOutput)
	}
	return int64(s.prompt.Tokens) + out
}

func (s *requestSupervisor) onQueueTimeout(ctx actor.Context) {
	if s.stage != stageQueued {
		return
	}
	s.stopWaiting(ctx)
	s.timedOut(ctx)
}

// timedOut answers a queued request whose wait ended: its deadline, its band's target or
// admission.queue_timeout_s passed.
func (s *requestSupervisor) timedOut(ctx actor.Context) {
	now := time.Now()
	if !now.Before(s.x.Deadline) {
		s.respondFault(ctx, &fault.Fault{Kind: fault.Deadline, Detail: "the request deadline passed while waiting for an engine"})
		return
	}
	if t := s.bandTarget(); !t.IsZero() && !now.Before(t) {
		s.reject(ctx, 503, fmt.Sprintf("no engine had room within band %q's ttft_target_s", s.x.Flow.BandName), "deadline_unmeetable")
		return
	}
	s.reject(ctx, 503, "no engine had room within admission.queue_timeout_s", "queue_timeout")
}

// bandTarget is when the request's band wants it to have a slot (arrival + the band's
// ttft_target_s), if that comes before its own deadline; zero otherwise.
func (s *requestSupervisor) bandTarget() time.Time {
	if s.x.Flow.TTFTTarget <= 0 {
		return time.Time{}
	}
	if t := s.x.Arrival.Add(s.x.Flow.TTFTTarget); t.Before(s.x.Deadline) {
		return t
	}
	return time.Time{}
}

// leaveQueue takes a queued request out of the queue and stops its timer.
func (s *requestSupervisor) leaveQueue(ctx actor.Context) {
	s.stopQueueTimer()
	s.stopWaiting(ctx)
}

// stopWaiting takes the request out of the admission queue. The pool finds the waiter by its
// sender, so this must be a Request: a plain Send has none, and the waiter would stay queued
// after the supervisor stopped, taking a later wake-up meant for a live request.
func (s *requestSupervisor) stopWaiting(ctx actor.Context) {
	ctx.Request(s.env.pool, &messages.StopWaiting{})
}

func (s *requestSupervisor) stopQueueTimer() {
	if s.queueTimer != nil {
		s.queueTimer.Stop()
		s.queueTimer = nil
	}
}
