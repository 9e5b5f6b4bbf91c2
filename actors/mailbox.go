package actors

import (
	"sync"

	"github.com/asynkron/protoactor-go/actor"
)

// inlineMailbox is the request supervisor's mailbox: protoactor's default one, minus what a
// short-lived actor on the synchronized dispatcher does not use. The default allocates five
// objects per actor (two lock-free queues, a ring buffer, their wrappers) and one per system
// message; this one is a single object with room for a few messages inline, so spawning and
// stopping the one actor per request costs a handful of allocations less (issue #17). The
// semantics are the default's: system messages first, SuspendMailbox/ResumeMailbox honoured,
// a panic escalated to the supervisor, and messages posted while the mailbox runs (from the
// actor itself or another goroutine) processed by the goroutine already running it.
type inlineMailbox struct {
	mu         sync.Mutex
	sys, user  []any
	sysBuf     [2]any
	userBuf    [4]any
	running    bool
	suspended  bool
	invoker    actor.MessageInvoker
	dispatcher actor.Dispatcher
	processFn  func() // m.process, bound once: a method value per schedule would allocate
}

func newInlineMailbox() actor.Mailbox {
	m := &inlineMailbox{}
	m.sys, m.user = m.sysBuf[:0], m.userBuf[:0]
	m.processFn = m.process
	return m
}

// inlineMailboxes is the props option that gives an actor an inlineMailbox.
var inlineMailboxes = actor.WithMailbox(newInlineMailbox)

func (m *inlineMailbox) PostUserMessage(msg any) {
	m.mu.Lock()
	m.user = append(m.user, msg)
	m.mu.Unlock()
	m.schedule()
}

func (m *inlineMailbox) PostSystemMessage(msg any) {
	m.mu.Lock()
	m.sys = append(m.sys, msg)
	m.mu.Unlock()
	m.schedule()
}

func (m *inlineMailbox) RegisterHandlers(invoker actor.MessageInvoker, dispatcher actor.Dispatcher) {
	m.invoker, m.dispatcher = invoker, dispatcher
}

func (m *inlineMailbox) Start() {}

func (m *inlineMailbox) UserMessageCount() int {
	m.mu.Lock()
	defer m.mu.Unlock()
	return len(m.user)
}

func (m *inlineMailbox) schedule() {
	m.mu.Lock()
	if m.running {
		m.mu.Unlock()
		return // the goroutine running the mailbox takes the message
	}
	m.running = true
	m.mu.Unlock()
	m.dispatcher.Schedule(m.processFn)
}

// process runs messages until none is left (none but user messages while suspended).
func (m *inlineMailbox) process() {
	for {
		m.run()
		m.mu.Lock()
		if len(m.sys) > 0 || (!m.suspended && len(m.user) > 0) {
			m.mu.Unlock()
			continue // posted after run looked, or left by a panic
		}
		m.running = false
		m.mu.Unlock()
		return
	}
}

func (m *inlineMailbox) run() {
	var msg any
	defer func() {
		if r := recover(); r != nil {
			m.invoker.EscalateFailure(r, msg)
		}
	}()
	for {
		m.mu.Lock()
		if len(m.sys) > 0 {
			msg = pop(&m.sys, m.sysBuf[:0])
			switch msg.(type) {
			case *actor.SuspendMailbox:
				m.suspended = true
				m.mu.Unlock()
				continue
			case *actor.ResumeMailbox:
				m.suspended = false
				m.mu.Unlock()
				continue
			}
			m.mu.Unlock()
			m.invoker.InvokeSystemMessage(msg)
			continue
		}
		if m.suspended || len(m.user) == 0 {
			m.mu.Unlock()
			return
		}
		msg = pop(&m.user, m.userBuf[:0])
		m.mu.Unlock()
		m.invoker.InvokeUserMessage(msg)
	}
}

// pop takes the first message of q; an emptied queue starts over on its inline buffer.
func pop(q *[]any, empty []any) any {
	s := *q
	msg := s[0]
	s[0] = nil
	if len(s) == 1 {
		*q = empty
	} else {
		*q = s[1:]
	}
	return msg
}
