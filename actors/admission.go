package actors

import (
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
	wait := min(s.set.request.QueueTimeout, time.Until(s.x.Deadline))
	if wait <= 0 {
		s.reject(ctx, 503, "no engine has room for the request", "no_capacity")
		return
	}
	s.stage = stageQueued
	s.full = s.full[:0]
	ctx.Request(s.env.pool, &messages.AwaitCapacity{Model: s.x.Body.Model, Front: s.frontOfQ})
	self, root := s.self, s.env.root
	s.queueTimer = time.AfterFunc(wait, func() { root.Send(self, &messages.QueueTimeout{}) })
}

// onCapacityAvailable tries placement again for a queued request an engine woke; a request that
// loses the race for the slot keeps its place at the front of the queue.
func (s *requestSupervisor) onCapacityAvailable(ctx actor.Context) {
	if s.stage == stageQueued {
		s.stopQueueTimer()
		s.frontOfQ = true
		s.place(ctx)
	}
}

func (s *requestSupervisor) onQueueFull(ctx actor.Context) {
	if s.stage == stageQueued {
		s.stopQueueTimer()
		s.reject(ctx, 503, "no engine has room and the admission queue is full", "queue_full")
	}
}

func (s *requestSupervisor) onQueueTimeout(ctx actor.Context) {
	if s.stage != stageQueued {
		return
	}
	s.stopWaiting(ctx)
	if !time.Now().Before(s.x.Deadline) {
		s.respondFault(ctx, &fault.Fault{Kind: fault.Deadline, Detail: "the request deadline passed while waiting for an engine"})
		return
	}
	s.reject(ctx, 503, "no engine had room within admission.queue_timeout_s", "queue_timeout")
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
