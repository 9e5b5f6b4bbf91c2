package actors

import (
	"errors"
	"strconv"
	"sync"
	"time"

	"github.com/asynkron/protoactor-go/actor"
	"github.com/google/uuid"

	"github.com/narwhal-router/narwhal/config"
	"github.com/narwhal-router/narwhal/messages"
	"github.com/narwhal-router/narwhal/transport"
)

// reqPhase is where a request stands in its life.
type reqPhase uint8

const (
	phasePlacing   reqPhase = iota // reserving a producer and a consumer slot
	phaseQueued                    // waiting for an engine to free a slot
	phasePrefill                   // the prefill leg runs
	phaseDecode                    // the decode leg runs, waiting for the first token
	phaseStreaming                 // committed: the data plane relays the stream
	phaseDone
)

var phaseNames = [...]string{"placing", "queued", "prefill", "decode", "streaming", "done"}

func (p reqPhase) String() string { return phaseNames[p] }

// Request outcomes, as metrics and the access log name them.
const (
	outcomeSuccess     = "success"
	outcomeError       = "error"        // failed before commit
	outcomeStreamError = "stream_error" // failed after commit
	outcomeRejected    = "rejected"     // never placed (unknown model, no capacity)
	outcomeClientGone  = "client_gone"
)

// errShutdown cancels requests still running when the shutdown grace period ends.
var errShutdown = errors.New("the router is shutting down")

// Abort asks a request supervisor to cancel its request (router shutdown).
type Abort struct{}

// requestSupervisor owns one client request from admission to cleanup: placement and phase
// reservations, the prefill and decode legs, handoff age, retries, the commit point, and the
// release of everything it holds. The legs run on goroutines that report back with messages;
// the supervisor never blocks, so a client hang-up or a timer is handled at once.
type requestSupervisor struct {
	r    *Router
	x    *transport.Exchange
	self *actor.PID

	phase      reqPhase
	attempt    int
	backendID  string
	producer   *engineView
	consumer   *engineView
	held       [2]*engineView // the reservation held per phase
	replies    int            // Reserve answers still to come
	legRunning bool
	full       []string // engines that refused a slot this placement round
	avoid      []string // engines that failed this request: used only if nothing else can serve
	exclude    []string // engines that pushed back (429/503): never retried for this request
	frontOfQ   bool
	queueTimer *time.Timer
	slot       *streamSlot

	gone      bool
	delivered bool
	finalized bool

	// measurements, all from x.Arrival
	ttft, firstByte, handoffAge time.Duration
	decodeStart                 time.Time
	prefillStarted              time.Time
	retries                     int
	lastFault                   *transport.Fault
	end                         transport.StreamEnd
	status                      int
	outcome                     string
}

// streamSlot hands a decode stream from its leg goroutine to the supervisor. If the supervisor
// stopped abnormally before taking it, the slot closes the stream so the engine connection
// never leaks.
type streamSlot struct {
	mu     sync.Mutex
	stream *transport.DecodeStream
	closed bool
}

func (s *streamSlot) put(stream *transport.DecodeStream, notify func()) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closed {
		if stream != nil {
			stream.Close()
		}
		return
	}
	s.stream = stream
	notify()
}

func (s *streamSlot) take() *transport.DecodeStream {
	s.mu.Lock()
	defer s.mu.Unlock()
	st := s.stream
	s.stream = nil
	return st
}

func (s *streamSlot) close() {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.closed = true
	if s.stream != nil {
		s.stream.Close()
		s.stream = nil
	}
}

func (s *requestSupervisor) Receive(ctx actor.Context) {
	switch m := ctx.Message().(type) {
	case *actor.Started:
		s.self = ctx.Self()
		s.r.live.Store(s.self.Id, s.self) // here, not in Dispatch: a fast failure could retire first
		s.slot = &streamSlot{}
		s.r.budget.deposit()
		s.startAttempt(ctx)
	case *messages.Reserved:
		s.onReserved(ctx, m)
	case *messages.PrefillDone:
		s.onPrefillDone(ctx, m)
	case *messages.DecodeStarted:
		s.onDecodeStarted(ctx, m)
	case *messages.StreamFinished:
		s.onStreamFinished(ctx, m)
	case *messages.ClientGone:
		s.onClientGone(ctx)
	case *Abort:
		s.abort(ctx)
	case *messages.CapacityAvailable:
		if s.phase == phaseQueued {
			s.stopQueueTimer()
			s.frontOfQ = true
			s.place(ctx)
		}
	case *messages.QueueFull:
		if s.phase == phaseQueued {
			s.stopQueueTimer()
			s.reject(ctx, 503, "no engine has room and the admission queue is full", "queue_full")
		}
	case *messages.QueueTimeout:
		if s.phase == phaseQueued {
			s.stopWaiting(ctx)
			if !time.Now().Before(s.x.Deadline) {
				s.respondFault(ctx, &transport.Fault{Kind: transport.FaultDeadline, Detail: "the request deadline passed while waiting for an engine"})
				return
			}
			s.reject(ctx, 503, "no engine had room within admission.queue_timeout_s", "queue_timeout")
		}
	case *messages.Describe:
		ctx.Respond(s.snapshot())
	case *actor.Stopped:
		s.cleanupAbnormalStop()
	}
}

func (s *requestSupervisor) startAttempt(ctx actor.Context) {
	s.attempt++
	s.backendID = uuid.NewString()
	s.full = s.full[:0]
	s.place(ctx)
}

// abort cancels the request for a router shutdown: a running leg fails with the cause and its
// handler answers 503; a request with nothing running is answered here.
func (s *requestSupervisor) abort(ctx actor.Context) {
	s.x.Abort(errShutdown)
	switch s.phase {
	case phaseQueued:
		s.stopQueueTimer()
		s.stopWaiting(ctx)
		s.respondShutdown(ctx)
	case phasePlacing:
		if s.replies == 0 {
			s.respondShutdown(ctx)
		}
	}
}

func (s *requestSupervisor) respondShutdown(ctx actor.Context) {
	s.releaseAll(ctx)
	s.respondFault(ctx, &transport.Fault{Kind: transport.FaultAborted, Detail: errShutdown.Error(), Err: errShutdown})
}

// place picks a producer and a consumer and asks both for a slot.
func (s *requestSupervisor) place(ctx actor.Context) {
	if s.x.Context().Err() != nil {
		s.respondShutdown(ctx)
		return
	}
	s.phase = phasePlacing
	model := s.x.Body.Model
	prod, why := s.r.fleet.pick(messages.PhasePrefill, model, s.avoid, s.full, s.exclude)
	if prod == nil {
		s.noPlacement(ctx, why, messages.PhasePrefill)
		return
	}
	cons, why := s.r.fleet.pick(messages.PhaseDecode, model, append(s.avoid[:len(s.avoid):len(s.avoid)], prod.name), s.full, s.exclude)
	if cons == nil {
		s.noPlacement(ctx, why, messages.PhaseDecode)
		return
	}
	s.producer, s.consumer = prod, cons
	s.replies = 2
	ctx.Request(prod.pid, &messages.Reserve{Phase: messages.PhasePrefill, Request: s.x.ID, Attempt: s.attempt})
	ctx.Request(cons.pid, &messages.Reserve{Phase: messages.PhaseDecode, Request: s.x.ID, Attempt: s.attempt})
}

func (s *requestSupervisor) noPlacement(ctx actor.Context, why scarcity, phase messages.Phase) {
	if why == noAdmitted && s.lastFault != nil {
		// A retry with nowhere to go (the other engines pushed back or are out of placement):
		// the client learns what failed, not that the fleet has no engine.
		s.respondFault(ctx, s.lastFault)
		return
	}
	switch why {
	case unknownModel:
		s.reject(ctx, 404, "the model `"+s.x.Body.Model+"` does not exist", "model_not_found")
	case noAdmitted:
		s.reject(ctx, 503, "no admitted engine can run the "+phase.String()+" leg for model `"+s.x.Body.Model+"`", "no_engine")
	default:
		s.await(ctx)
	}
}

// await queues the request until an engine frees a slot, bounded by admission.queue_timeout_s
// and the request deadline.
func (s *requestSupervisor) await(ctx actor.Context) {
	if s.r.cfg.Admission.MaxQueue == 0 {
		s.reject(ctx, 503, "no engine has room for the request", "no_capacity")
		return
	}
	wait := min(s.r.cfg.Admission.QueueTimeoutS.Duration(), time.Until(s.x.Deadline))
	if wait <= 0 {
		s.reject(ctx, 503, "no engine has room for the request", "no_capacity")
		return
	}
	s.phase = phaseQueued
	s.full = s.full[:0]
	ctx.Request(s.r.pool, &messages.AwaitCapacity{Model: s.x.Body.Model, Front: s.frontOfQ})
	self, root := s.self, s.r.root
	s.queueTimer = time.AfterFunc(wait, func() { root.Send(self, &messages.QueueTimeout{}) })
}

// stopWaiting takes the request out of the admission queue. The pool finds the waiter by its
// sender, so this must be a Request: a plain Send has none, and the waiter would stay queued
// after the supervisor stopped, taking a later wake-up meant for a live request.
func (s *requestSupervisor) stopWaiting(ctx actor.Context) {
	ctx.Request(s.r.pool, &messages.StopWaiting{})
}

func (s *requestSupervisor) stopQueueTimer() {
	if s.queueTimer != nil {
		s.queueTimer.Stop()
		s.queueTimer = nil
	}
}

func (s *requestSupervisor) onReserved(ctx actor.Context, m *messages.Reserved) {
	if m.Attempt != s.attempt || s.replies == 0 {
		return
	}
	s.replies--
	if m.Granted {
		s.held[m.Phase] = s.r.fleet.engine(m.Engine)
	} else {
		s.full = append(s.full, m.Engine)
	}
	if s.replies > 0 {
		return
	}
	if s.gone {
		s.releaseAll(ctx)
		s.finishGone(ctx)
		return
	}
	if s.x.Context().Err() != nil {
		s.respondShutdown(ctx)
		return
	}
	if s.held[messages.PhasePrefill] != nil && s.held[messages.PhaseDecode] != nil {
		s.startPrefill(ctx)
		return
	}
	s.releaseAll(ctx) // half a placement is no placement: retry both with the refusers excluded
	s.place(ctx)
}

func (s *requestSupervisor) startPrefill(ctx actor.Context) {
	s.phase = phasePrefill
	s.legRunning = true
	s.prefillStarted = time.Now()
	req := s.x.EngineRequest(s.backendID)
	client, legCtx := s.producer.client, s.x.Context()
	self, root, attempt := s.self, s.r.root, s.attempt
	go func() {
		res, err := client.Prefill(legCtx, req)
		root.Send(self, &messages.PrefillDone{Attempt: attempt, Result: res, Err: err})
	}()
}

func (s *requestSupervisor) onPrefillDone(ctx actor.Context, m *messages.PrefillDone) {
	s.legRunning = false
	if m.Err != nil {
		f := asFault(m.Err, transport.LegPrefill, s.producer.name)
		s.release(ctx, messages.PhasePrefill, f, false)
		s.release(ctx, messages.PhaseDecode, nil, true)
		s.fail(ctx, f)
		return
	}
	res := m.Result
	s.ttft = res.Completed.Sub(s.x.Arrival)
	if s.gone {
		s.release(ctx, messages.PhasePrefill, nil, false)
		s.release(ctx, messages.PhaseDecode, nil, true)
		s.finishGone(ctx)
		return
	}
	switch {
	case s.producer == s.consumer:
		res = res.WithoutTransfer() // same-worker decode: prefix caching or recompute
	case !res.HasDescriptor():
		if s.r.cfg.Handoff.OnMissing == config.OnMissingFail {
			s.r.metrics.MissingDescriptor(s.producer.name, config.OnMissingFail)
			f := &transport.Fault{Kind: transport.FaultMissingDescriptor, Leg: transport.LegPrefill, Engine: s.producer.name,
				Detail: "the producer returned no handoff descriptor"}
			s.release(ctx, messages.PhasePrefill, f, false)
			s.release(ctx, messages.PhaseDecode, nil, true)
			s.fail(ctx, f)
			return
		}
		s.r.metrics.MissingDescriptor(s.producer.name, config.OnMissingRecompute)
	}
	now := time.Now()
	s.handoffAge = res.Age(now)
	if max := s.r.cfg.Handoff.MaxAgeS.Duration(); s.handoffAge > max {
		f := &transport.Fault{Kind: transport.FaultStaleHandoff, Leg: transport.LegPrefill, Engine: s.producer.name,
			Detail: "the handoff is " + s.handoffAge.Round(time.Millisecond).String() + " old, older than handoff.max_age_s (" + max.String() + ")"}
		s.release(ctx, messages.PhasePrefill, f, false)
		s.release(ctx, messages.PhaseDecode, nil, true)
		s.fail(ctx, f)
		return
	}
	s.r.metrics.HandoffAge(s.x.Body.Endpoint.String(), s.handoffAge)
	s.startDecode(res, now)
}

func (s *requestSupervisor) startDecode(res transport.PrefillResult, now time.Time) {
	s.phase = phaseDecode
	s.legRunning = true
	s.decodeStart = now
	req := s.x.EngineRequest(s.backendID)
	client, legCtx, slot := s.consumer.client, s.x.Context(), s.slot
	self, root, attempt := s.self, s.r.root, s.attempt
	go func() {
		stream, err := client.Decode(legCtx, res, req)
		slot.put(stream, func() { root.Send(self, &messages.DecodeStarted{Attempt: attempt, Err: err}) })
	}()
}

func (s *requestSupervisor) onDecodeStarted(ctx actor.Context, m *messages.DecodeStarted) {
	s.legRunning = false
	stream := s.slot.take()
	if m.Err != nil {
		f := asFault(m.Err, transport.LegDecode, s.consumer.name)
		if f.Kind == transport.FaultDescriptor { // the producer's fault: the consumer never ran
			s.release(ctx, messages.PhasePrefill, f, false)
			s.release(ctx, messages.PhaseDecode, nil, true)
		} else {
			s.release(ctx, messages.PhasePrefill, nil, false)
			s.releaseDecode(ctx, f)
		}
		s.fail(ctx, f)
		return
	}
	// The first token is in: the KV cache has moved and the producer's part is over.
	s.release(ctx, messages.PhasePrefill, nil, false)
	if s.gone {
		stream.Close()
		s.release(ctx, messages.PhaseDecode, nil, true)
		s.finishGone(ctx)
		return
	}
	s.firstByte = stream.FirstTokenAt.Sub(s.x.Arrival)
	s.phase = phaseStreaming
	s.deliver(transport.Verdict{Stream: stream, Timing: s.timing(), Routing: s.routing()})
}

func (s *requestSupervisor) onStreamFinished(ctx actor.Context, m *messages.StreamFinished) {
	s.end = m.End
	switch f := m.End.Fault; {
	case m.End.ClientGone:
		s.r.metrics.ClientDisconnect(phaseStreaming.String())
		s.release(ctx, messages.PhaseDecode, nil, true)
		status := 200
		if !s.x.Body.Stream { // the assembled response was never sent
			status = 0
		}
		s.finalize(ctx, status, outcomeClientGone)
	case f != nil:
		s.lastFault = f
		s.r.metrics.EngineFault(f.Engine, f.Leg.String(), f.Kind.String(), f.Reason)
		s.releaseDecode(ctx, f)
		status := 200
		if !s.x.Body.Stream { // nothing was sent yet: the client got an error status
			status = f.ClientStatus()
		}
		s.finalize(ctx, status, outcomeStreamError)
	default:
		s.release(ctx, messages.PhaseDecode, nil, false)
		s.finalize(ctx, 200, outcomeSuccess)
	}
}

func (s *requestSupervisor) onClientGone(ctx actor.Context) {
	if s.gone || s.phase == phaseDone {
		return
	}
	s.gone = true
	s.x.Abort(transport.ErrClientGone)
	switch s.phase {
	case phaseQueued:
		s.stopQueueTimer()
		s.stopWaiting(ctx)
		s.finishGone(ctx)
	case phasePlacing:
		if s.replies == 0 {
			s.finishGone(ctx)
		}
	case phaseStreaming:
		// the relay sees the cancelled stream and reports StreamFinished
	}
	// prefill and decode: the aborted leg reports back, and its handler finishes
}

// fail decides between a fresh attempt and an error response (SPEC §8): a retry only for a
// transient fault, before visible output, within the attempts, the deadline and the budget.
func (s *requestSupervisor) fail(ctx actor.Context, f *transport.Fault) {
	s.lastFault = f
	if s.gone {
		s.finishGone(ctx)
		return
	}
	if f.Kind == transport.FaultCanceled {
		s.respondFault(ctx, f)
		return
	}
	s.r.metrics.EngineFault(f.Engine, f.Leg.String(), f.Kind.String(), f.Reason)
	if f.Retriable() && s.attempt < s.r.cfg.Recovery.MaxAttempts && time.Now().Before(s.x.Deadline) {
		if s.r.budget.tryRetry() {
			s.retries++
			s.r.metrics.Retry(f.Kind.String())
			if f.Kind == transport.FaultBackpressure {
				s.exclude = append(s.exclude, f.Engine)
			} else if !contains(s.avoid, f.Engine) {
				s.avoid = append(s.avoid, f.Engine)
			}
			s.startAttempt(ctx)
			return
		}
		s.r.metrics.RetryBudgetExhausted()
	}
	s.respondFault(ctx, f)
}

func (s *requestSupervisor) respondFault(ctx actor.Context, f *transport.Fault) {
	s.lastFault = f
	status := f.ClientStatus()
	v := transport.Verdict{Status: status, Body: transport.FaultEnvelope(f), Timing: s.timing(), Routing: s.routing()}
	if status == 503 {
		v.RetryAfter = f.RetryAfter
		if v.RetryAfter == "" {
			v.RetryAfter = s.retryAfter()
		}
	}
	s.deliver(v)
	s.finalize(ctx, status, outcomeError)
}

// reject answers a request that could not be placed.
func (s *requestSupervisor) reject(ctx actor.Context, status int, message, code string) {
	v := transport.Verdict{Status: status, Timing: s.timing(), Routing: s.routing(),
		Body: transport.AppendErrorEnvelope(nil, transport.ErrorBody{Message: message, Code: code, Type: errorTypeFor(status)})}
	if status == 503 {
		v.RetryAfter = s.retryAfter()
		s.r.metrics.AdmissionRejected(code)
	}
	s.deliver(v)
	s.finalize(ctx, status, outcomeRejected)
}

func (s *requestSupervisor) retryAfter() string {
	return strconv.Itoa(max(1, int(s.r.cfg.Recovery.ProbeIntervalS)))
}

func errorTypeFor(status int) string {
	if status == 404 {
		return "invalid_request_error"
	}
	return "service_unavailable"
}

func (s *requestSupervisor) finishGone(ctx actor.Context) {
	s.r.metrics.ClientDisconnect(s.phase.String())
	s.deliver(transport.Verdict{})
	s.finalize(ctx, 0, outcomeClientGone)
}

func (s *requestSupervisor) deliver(v transport.Verdict) {
	if !s.delivered {
		s.delivered = true
		s.x.Deliver(v)
	}
}

// release returns the slot held for phase. fault is what the engine's breaker learns; neutral
// says the leg's end says nothing about the engine.
func (s *requestSupervisor) release(ctx actor.Context, phase messages.Phase, f *transport.Fault, neutral bool) {
	e := s.held[phase]
	if e == nil {
		return
	}
	s.held[phase] = nil
	partner := s.consumer
	if phase == messages.PhaseDecode {
		partner = s.producer
	}
	rel := &messages.Release{Phase: phase, Request: s.x.ID, Fault: f, Neutral: neutral}
	if partner != nil && partner != e {
		rel.Partner = partner.name
	}
	ctx.Send(e.pid, rel)
}

// releaseDecode releases the consumer's slot with a decode fault, which counts against the
// consumer unless the client's cancellation caused it.
func (s *requestSupervisor) releaseDecode(ctx actor.Context, f *transport.Fault) {
	s.release(ctx, messages.PhaseDecode, f, f.Kind == transport.FaultCanceled)
}

func (s *requestSupervisor) releaseAll(ctx actor.Context) {
	s.release(ctx, messages.PhasePrefill, nil, true)
	s.release(ctx, messages.PhaseDecode, nil, true)
}

// finalize records the request's one outcome and stops the supervisor.
func (s *requestSupervisor) finalize(ctx actor.Context, status int, outcome string) {
	if s.finalized {
		return
	}
	s.finalized = true
	s.phase = phaseDone
	s.status, s.outcome = status, outcome
	s.stopQueueTimer()
	s.releaseAll(ctx)
	s.x.Abort(errFinished) // nothing of the request may run on
	s.r.requestDone(s)
	ctx.Stop(s.self)
}

var errFinished = errors.New("request finished")

// cleanupAbnormalStop runs when the supervisor stops; after a panic it answers the client,
// releases every slot and closes a stream nobody took.
func (s *requestSupervisor) cleanupAbnormalStop() {
	s.slot.close()
	if s.finalized {
		return
	}
	s.x.Abort(errors.New("request supervisor crashed"))
	s.deliver(transport.Verdict{Status: 500, Body: transport.AppendErrorEnvelope(nil,
		transport.ErrorBody{Message: "internal error in the router", Type: "server_error", Code: "internal_error"})})
	for p, e := range s.held {
		if e != nil {
			s.r.root.Send(e.pid, &messages.Release{Phase: messages.Phase(p), Request: s.x.ID, Neutral: true})
			s.held[p] = nil
		}
	}
	s.finalized = true
	s.status, s.outcome = 500, outcomeError
	s.r.requestDone(s)
}

func (s *requestSupervisor) timing() transport.Timing {
	return transport.Timing{TTFT: s.ttft, FirstByte: s.firstByte}
}

func (s *requestSupervisor) routing() transport.Routing {
	r := transport.Routing{Attempts: s.attempt}
	if s.producer != nil {
		r.Producer = s.producer.name
	}
	if s.consumer != nil {
		r.Consumer = s.consumer.name
	}
	return r
}

func (s *requestSupervisor) snapshot() *messages.RequestState {
	st := &messages.RequestState{
		ID: s.x.ID, Endpoint: s.x.Body.Endpoint.String(), Model: s.x.Body.Model, Phase: s.phase.String(),
		Attempt: s.attempt, ElapsedS: time.Since(s.x.Arrival).Seconds(),
	}
	if s.producer != nil && s.phase != phasePlacing && s.phase != phaseQueued {
		st.Producer, st.Consumer = s.producer.name, s.consumer.name
	}
	if s.phase == phaseDecode || s.phase == phaseStreaming {
		st.HandoffAgeS = s.handoffAge.Seconds()
	}
	if s.held[messages.PhasePrefill] != nil {
		st.Reserved.Prefill = 1
	}
	if s.held[messages.PhaseDecode] != nil {
		st.Reserved.Decode = 1
	}
	return st
}

func asFault(err error, leg transport.Leg, engine string) *transport.Fault {
	if f, ok := transport.AsFault(err); ok {
		return f
	}
	return &transport.Fault{Kind: transport.FaultUnreachable, Leg: leg, Engine: engine, Detail: "engine leg failed", Err: err}
}
