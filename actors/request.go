package actors

import (
	"errors"
	"time"

	"github.com/asynkron/protoactor-go/actor"
	"github.com/google/uuid"

	"github.com/narwhal-router/narwhal/config"
	"github.com/narwhal-router/narwhal/messages"
	"github.com/narwhal-router/narwhal/transport/fault"
	"github.com/narwhal-router/narwhal/transport/ingress"
	"github.com/narwhal-router/narwhal/transport/wire"
)

// reqPhase is where a request stands in its life.
type reqPhase uint8

const (
	phasePlacing   reqPhase = iota // choosing engines and taking their slots
	phaseQueued                    // waiting for an engine to free a slot
	phaseRunning                   // ingress runs the planned attempt (prefill, then decode)
	phaseStreaming                 // committed: the data plane relays the stream
	phaseDone
)

var phaseNames = [...]string{"placing", "queued", "running", "streaming", "done"}

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

// requestSupervisor owns one client request from admission to cleanup: placement and the phase
// reservations, each attempt's plan, handoff policy, retries, the answer before commit, and
// the release of everything it holds. It decides; the request's own ingress goroutine carries
// each planned attempt out (prefill, handoff checks, decode to the first token) and reports
// back, so a request costs a handful of messages and never a goroutine per leg. The
// supervisor never blocks: a hang-up, a timer or a shutdown is handled the moment it arrives.
type requestSupervisor struct {
	r    *Router
	x    *ingress.Exchange
	self *actor.PID

	phase      reqPhase
	attempt    int
	backendID  string
	producer   *engineView
	consumer   *engineView
	held       [2]*engineView // the slot held per phase
	full       []string       // engines found full this placement round
	avoid      []string       // engines that failed this request: used only if nothing else can serve
	exclude    []string       // engines that pushed back (429/503): never retried for this request
	frontOfQ   bool
	queueTimer *time.Timer

	// prompt is the prompt as placement reads it (computed once); verdict the last placement's
	// disaggregation decision, prefixMatch the consumer's prefix-index match in blocks.
	prompt      wire.Prompt
	prompted    bool
	verdict     verdict
	prefixMatch int

	gone      bool // the client hung up
	answered  bool // ingress got its final command
	finalized bool

	// measurements, all from x.Arrival
	ttft, firstByte, handoffAge time.Duration
	decodeStart                 time.Time
	lastFault                   *fault.Fault
	// failures are this request's failed legs before commit that count against their engines,
	// held until the request's fate decides whom they blame (judge).
	failures []heldFailure
	end      messages.StreamFinished
	status   int
	outcome  string
}

func (s *requestSupervisor) Receive(ctx actor.Context) {
	switch m := ctx.Message().(type) {
	case *actor.Started:
		s.self = ctx.Self()
	case *ingress.Exchange: // Dispatch sends it once, right after the spawn
		if s.x != nil {
			return
		}
		s.x = m
		s.r.live.add(s.self) // here, not in Dispatch: a fast failure could retire first
		s.r.budget.deposit()
		s.startAttempt(ctx)
	case *messages.AttemptEnded:
		s.onAttemptEnded(ctx, m)
	case *messages.StreamFinished:
		s.onStreamFinished(ctx, m)
	case *messages.ClientGone:
		s.onClientGone(ctx)
	case *messages.Abort:
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
				s.respondFault(ctx, &fault.Fault{Kind: fault.Deadline, Detail: "the request deadline passed while waiting for an engine"})
				return
			}
			s.reject(ctx, 503, "no engine had room within admission.queue_timeout_s", "queue_timeout")
		}
	case *messages.Describe:
		ctx.Respond(s.snapshot())
	case *actor.Stopped:
		if s.x != nil { // nil only for a supervisor stopped before Dispatch's message, which holds nothing
			s.cleanupAbnormalStop(ctx)
		}
	}
}

func (s *requestSupervisor) startAttempt(ctx actor.Context) {
	s.attempt++
	s.backendID = uuid.NewString()
	s.full = s.full[:0]
	s.place(ctx)
}

// place picks a consumer, decides whether the request pays a prefill leg (decide), picks a
// producer if so, takes a slot on each and hands ingress the plan.
func (s *requestSupervisor) place(ctx actor.Context) {
	if s.x.Context().Err() != nil {
		s.respondShutdown(ctx)
		return
	}
	s.phase = phasePlacing
	model := s.x.Body.Model
	for s.x.Body.Endpoint.Passthrough() { // one engine and no prefill (ingress/passthrough.go)
		cons, why := s.r.fleet.pick(fault.PhaseDecode, model, s.avoid, s.full, s.exclude)
		if cons == nil {
			s.noPlacement(ctx, why, fault.PhaseDecode)
			return
		}
		if !cons.reserve(fault.PhaseDecode) {
			s.full = append(s.full, cons.name)
			continue
		}
		s.producer, s.consumer = nil, cons
		s.held = [2]*engineView{nil, cons}
		s.reportSlots(cons)
		s.sendPlan()
		return
	}
	if !s.prompted {
		s.prompt, s.prompted = s.x.Body.Prompt(s.r.rt.Fleet.BlockWords), true
	}
	f, blocks := s.r.fleet, s.prompt.Blocks
	for {
		c := f.pickFor(ask{phase: fault.PhaseDecode, model: model, avoid: s.avoid, full: s.full, exclude: s.exclude, blocks: blocks}, s.r.metrics)
		if c.engine == nil {
			s.noPlacement(ctx, c.why, fault.PhaseDecode)
			return
		}
		cons := c.engine
		s.verdict, s.prefixMatch = s.decide(cons, c.match), c.match
		var prod *engineView
		if !s.verdict.local {
			p := f.pickFor(ask{phase: fault.PhasePrefill, model: model, avoid: append(s.avoid[:len(s.avoid):len(s.avoid)], cons.name),
				full: s.full, exclude: s.exclude, blocks: blocks, tokens: s.prompt.Tokens}, s.r.metrics)
			switch auto := s.r.rt.Fleet.Disaggregation == config.DisaggAuto; {
			case auto && p.engine == nil && p.why == noRoom && s.uncachedOn(c.match) <= s.r.rt.Fleet.MaxLocalPrompt:
				// Every producer is full: the consumer computes a prompt it can afford rather
				// than wait.
				s.verdict = verdict{true, reasonPrefillSaturated}
			case auto && (p.engine == cons || (p.engine == nil && p.why != noRoom)):
				// Nowhere else to prefill (none admitted, or only the consumer itself): the
				// consumer computes the prompt rather than fail or prefill twice.
				s.verdict = verdict{true, reasonNoProducer}
			case p.engine == nil:
				s.noPlacement(ctx, p.why, fault.PhasePrefill)
				return
			default:
				prod = p.engine
			}
		}
		// The views were read a moment ago; the slots are the authority. A refusal narrows the
		// next round, so the loop ends.
		if prod != nil && !prod.reserve(fault.PhasePrefill) {
			s.full = append(s.full, prod.name)
			continue
		}
		if prod != nil {
			prod.prefillTokens.Add(int64(s.prompt.Tokens)) // returned with the slot (release)
		}
		if !cons.reserve(fault.PhaseDecode) {
			if prod != nil {
				s.held[fault.PhasePrefill] = prod
				s.release(ctx, fault.PhasePrefill, nil, true)
			}
			s.full = append(s.full, cons.name)
			continue
		}
		s.producer, s.consumer = prod, cons
		s.held = [2]*engineView{prod, cons}
		if prod != nil {
			s.reportSlots(prod)
			f.index.record(blocks, prod.idx)
		}
		s.reportSlots(cons)
		f.index.record(blocks, cons.idx)
		break
	}
	s.countDecision()
	s.sendPlan()
}

// sendPlan hands ingress the attempt's plan; the producer is nil for a passthrough request
// and a local decode.
func (s *requestSupervisor) sendPlan() {
	s.phase = phaseRunning
	plan := &ingress.Plan{
		Attempt:          s.attempt,
		BackendRequestID: s.backendID,
		Consumer:         s.consumer.client,
		Local:            s.producer == nil,
		FailOnMissing:    s.r.rt.Request.FailOnMissing,
		MaxHandoffAge:    s.r.rt.Request.MaxHandoffAge,
	}
	if s.producer != nil {
		plan.Producer, plan.SameWorker = s.producer.client, s.producer == s.consumer
	}
	s.x.Send(ingress.Command{Plan: plan})
}

func (s *requestSupervisor) noPlacement(ctx actor.Context, why scarcity, phase fault.Phase) {
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
	if s.r.rt.Request.MaxQueue == 0 {
		s.reject(ctx, 503, "no engine has room for the request", "no_capacity")
		return
	}
	wait := min(s.r.rt.Request.QueueTimeout, time.Until(s.x.Deadline))
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

// onAttemptEnded takes ingress's report of the planned attempt: the commit, or the fault.
func (s *requestSupervisor) onAttemptEnded(ctx actor.Context, o *messages.AttemptEnded) {
	if o.Attempt != s.attempt || s.phase != phaseRunning {
		return // unreachable: one attempt runs at a time
	}
	if !o.PrefillDone.IsZero() {
		s.ttft = o.PrefillDone.Sub(s.x.Arrival)
	}
	if !o.DecodeStarted.IsZero() {
		s.decodeStart, s.handoffAge = o.DecodeStarted, o.HandoffAge
		if s.producer != nil { // a local decode has no handoff
			s.r.metrics.HandoffAge(s.x.Body.Endpoint.String(), o.HandoffAge)
		}
	}
	if o.MissingDescriptor {
		s.r.metrics.MissingDescriptor(s.producer.name, config.OnMissingRecompute)
	}
	if o.Committed {
		// Committed. The first token means the KV cache has moved: the producer's part is over.
		s.firstByte = o.FirstTokenAt.Sub(s.x.Arrival)
		s.phase = phaseStreaming
		s.r.commits.Add(1)
		s.judge(ctx, true)
		s.release(ctx, fault.PhasePrefill, nil, false)
		return // ingress relays the stream; a hang-up meanwhile shows in StreamFinished
	}
	f := o.Fault
	if f.Kind == fault.MissingDescriptor {
		s.r.metrics.MissingDescriptor(s.producer.name, config.OnMissingFail)
	}
	// The request ended on our side (client gone, shutdown): nothing to learn about the engine.
	cancelled := f.RouterSide()
	if f.Phase == fault.PhasePrefill { // the prefill, or the handoff it made: the consumer never ran
		s.release(ctx, fault.PhasePrefill, f, cancelled)
		s.release(ctx, fault.PhaseDecode, nil, true)
	} else {
		s.release(ctx, fault.PhasePrefill, nil, cancelled)
		s.release(ctx, fault.PhaseDecode, f, cancelled)
	}
	s.fail(ctx, f)
}

func (s *requestSupervisor) onStreamFinished(ctx actor.Context, m *messages.StreamFinished) {
	s.end = *m
	switch f := m.Fault; {
	case m.ClientGone:
		s.r.metrics.ClientDisconnect(phaseStreaming.String())
		s.release(ctx, fault.PhaseDecode, nil, true)
		status := 200
		if !s.x.Body.Stream { // the assembled response was never sent
			status = 0
		}
		s.finalize(ctx, status, outcomeClientGone)
	case f != nil:
		s.lastFault = f
		s.r.metrics.EngineFault(f.Engine, f.Phase.String(), f.Kind.String(), f.Reason)
		s.release(ctx, fault.PhaseDecode, f, f.RouterSide())
		status := 200
		if !s.x.Body.Stream { // nothing was sent yet: the client got an error status
			status = f.ClientStatus()
		}
		s.finalize(ctx, status, outcomeStreamError)
	default:
		s.release(ctx, fault.PhaseDecode, nil, false)
		s.finalize(ctx, 200, outcomeSuccess)
	}
}

func (s *requestSupervisor) onClientGone(ctx actor.Context) {
	if s.gone || s.phase == phaseDone {
		return
	}
	s.gone = true
	s.x.Abort(fault.ErrClientGone)
	if s.phase == phaseQueued {
		s.stopQueueTimer()
		s.stopWaiting(ctx)
		s.finishGone(ctx)
	}
	// Running: the aborted attempt reports back, and finishes. Streaming: the relay sees the
	// cancelled stream and reports StreamFinished.
}

// abort cancels the request for a router shutdown: a running attempt fails with the cause and
// is answered 503; a queued request is answered here.
func (s *requestSupervisor) abort(ctx actor.Context) {
	s.x.Abort(errShutdown)
	if s.phase == phaseQueued {
		s.stopQueueTimer()
		s.stopWaiting(ctx)
		s.respondShutdown(ctx)
	}
}

func (s *requestSupervisor) respondShutdown(ctx actor.Context) {
	s.respondFault(ctx, &fault.Fault{Kind: fault.Aborted, Detail: errShutdown.Error(), Err: errShutdown})
}

// fail decides between a fresh attempt and an error response (SPEC §8): a retry only for a
// transient fault, before visible output, within the attempts, the deadline and the budget.
func (s *requestSupervisor) fail(ctx actor.Context, f *fault.Fault) {
	s.lastFault = f
	if s.gone {
		s.finishGone(ctx)
		return
	}
	if f.RouterSide() {
		s.respondFault(ctx, f)
		return
	}
	s.r.metrics.EngineFault(f.Engine, f.Phase.String(), f.Kind.String(), f.Reason)
	if f.Retriable() && s.attempt < s.r.rt.Request.MaxAttempts && time.Now().Before(s.x.Deadline) {
		if s.r.budget.tryRetry() {
			s.r.metrics.Retry(f.Kind.String())
			switch {
			case f.Shuns(), s.breakerTakesOut(f):
				s.exclude = append(s.exclude, f.Engine)
			case !contains(s.avoid, f.Engine):
				s.avoid = append(s.avoid, f.Engine)
			}
			s.startAttempt(ctx)
			return
		}
		s.r.metrics.RetryBudgetExhausted()
	}
	s.respondFault(ctx, f)
}

// breakerTakesOut says the fault just seen would take its engine out of placement once counted
// (a quarantine, or the failure that completes the ejection streak), as the engine actor
// publishes it. The breaker hears of the failure when the request's fate is known (judge); the
// retry must not land there meanwhile.
func (s *requestSupervisor) breakerTakesOut(f *fault.Fault) bool {
	e := s.r.fleet.engine(f.Engine)
	return e != nil && f.CountsAgainstEngine() && e.takesOut.Load()
}

// heldFailure is a failed leg waiting for judgment, with the report its engine would get.
type heldFailure struct {
	engine *engineView
	fault  *fault.Fault
	report *messages.LegOutcome
}

// judge decides whom the request's failed legs blame, once its fate is known, and tells the
// breakers. A failure that follows the request rather than the engine — a prompt that makes
// every engine hang or fail — must not eject a healthy fleet, so:
//
//   - if the request went on to commit on some engine, every earlier failure was its engine's:
//     each is counted;
//   - if it never committed and failed the same way (leg, fault kind, status) on two or more
//     engines, those failures are the request's: none extends a streak, each is counted in
//     request_attributed_failures;
//   - everything else (a single failure, failures of different kinds) is counted as before.
//
// Attribution also needs evidence that the fleet serves other requests: some request committed
// since failures were last attributed. A fleet where every engine fails every request looks
// like a stream of poison requests; without that evidence its failures are counted, so it is
// still ejected (and the whole-wave policy applies).
func (s *requestSupervisor) judge(ctx actor.Context, committed bool) {
	fs := s.failures
	if len(fs) == 0 {
		return
	}
	s.failures = nil
	blamed := make([]bool, len(fs))
	suspect := false
	if !committed {
		for i := range fs {
			for j := range fs {
				if sameWay(fs[i].fault, fs[j].fault) {
					blamed[i], suspect = true, true
				}
			}
		}
	}
	if suspect {
		if c := s.r.commits.Load(); c > s.r.attributedAt.Load() {
			s.r.attributedAt.Store(c)
		} else {
			clear(blamed)
		}
	}
	for i, f := range fs {
		if blamed[i] {
			s.r.metrics.RequestAttributedFailure(f.fault.Phase.String(), f.fault.Kind.String())
			s.r.log.Debug("failure attributed to the request", "request_id", s.x.ID, "engine", f.engine.name,
				"leg", f.fault.Phase.String(), "kind", f.fault.Kind.String())
			continue
		}
		ctx.Send(f.engine.pid, f.report)
	}
}

// sameWay says two failures of one request on different engines look alike: the same leg, the
// same fault kind and the same engine status.
func sameWay(a, b *fault.Fault) bool {
	return a.Engine != b.Engine && a.Phase == b.Phase && a.Kind == b.Kind && a.Status == b.Status
}

func (s *requestSupervisor) respondFault(ctx actor.Context, f *fault.Fault) {
	s.lastFault = f
	status := f.ClientStatus()
	v := ingress.Verdict{Status: status, Body: fault.ClientBody(f, s.r.rt.Server.ExposeEngineErrors), Timing: s.timing(), Routing: s.routing()}
	if status == 503 {
		v.RetryAfter = f.RetryAfter
		if v.RetryAfter == "" {
			v.RetryAfter = s.retryAfter()
		}
	}
	s.answer(v)
	s.finalize(ctx, status, outcomeError)
}

// reject answers a request that could not be placed.
func (s *requestSupervisor) reject(ctx actor.Context, status int, message, code string) {
	v := ingress.Verdict{Status: status, Timing: s.timing(), Routing: s.routing(),
		Body: fault.AppendErrorEnvelope(nil, fault.ErrorBody{Message: message, Code: code, Type: errorTypeFor(status)})}
	if status == 503 {
		v.RetryAfter = s.retryAfter()
		s.r.metrics.AdmissionRejected(code)
	}
	s.answer(v)
	s.finalize(ctx, status, outcomeRejected)
}

func (s *requestSupervisor) retryAfter() string {
	return s.r.rt.Request.RetryAfter
}

func errorTypeFor(status int) string {
	if status == 404 {
		return "invalid_request_error"
	}
	return "service_unavailable"
}

func (s *requestSupervisor) finishGone(ctx actor.Context) {
	s.r.metrics.ClientDisconnect(s.phase.String())
	s.answer(ingress.Verdict{})
	s.finalize(ctx, 0, outcomeClientGone)
}

// answer gives ingress its final command. It is only ever called while ingress waits for one:
// after the dispatch, after a failed attempt, or while queued.
func (s *requestSupervisor) answer(v ingress.Verdict) {
	if !s.answered {
		s.answered = true
		s.x.Send(ingress.Command{Verdict: v})
	}
}

// release returns the slot held for phase and tells the engine's breaker what it needs to know:
// a fault that counts against it, or a success while it has a streak to reset. neutral says
// the leg's end says nothing about the engine.
func (s *requestSupervisor) release(ctx actor.Context, phase fault.Phase, f *fault.Fault, neutral bool) {
	e := s.held[phase]
	if e == nil {
		return
	}
	s.held[phase] = nil
	if phase == fault.PhasePrefill {
		e.prefillTokens.Add(-int64(s.prompt.Tokens))
	}
	if wasFull := e.release(phase); wasFull && s.r.queued.Load() > 0 {
		ctx.Send(s.r.pool, &messages.CapacityFreed{Engine: e.name})
	}
	s.reportSlots(e)
	if neutral || (f == nil && e.streak.Load() == 0) || (f != nil && !f.CountsAgainstEngine()) {
		return
	}
	out := &messages.LegOutcome{Phase: phase, Fault: f}
	partner := s.consumer
	if phase == fault.PhaseDecode {
		partner = s.producer
	}
	if partner != nil && partner != e {
		out.Partner = partner.name
	}
	if f != nil && s.phase != phaseStreaming {
		s.failures = append(s.failures, heldFailure{engine: e, fault: f, report: out})
		return // judged when the request's fate is known
	}
	ctx.Send(e.pid, out)
}

func (s *requestSupervisor) reportSlots(e *engineView) {
	p, d := e.reserved()
	s.r.metrics.EngineInflight(e.name, p, d)
}

// finalize records the request's one outcome and stops the supervisor.
func (s *requestSupervisor) finalize(ctx actor.Context, status int, outcome string) {
	if s.finalized {
		return
	}
	s.finalized = true
	s.judge(ctx, false) // failures still held: the request never committed
	s.phase = phaseDone
	s.status, s.outcome = status, outcome
	s.stopQueueTimer()
	s.release(ctx, fault.PhasePrefill, nil, true)
	s.release(ctx, fault.PhaseDecode, nil, true)
	s.x.Abort(errFinished) // nothing of the request may run on
	s.r.requestDone(s)
	ctx.Stop(s.self)
}

var errFinished = errors.New("request finished")

// cleanupAbnormalStop runs when the supervisor stops; after a panic it answers the client (once
// ingress is back from a running attempt), releases every slot and cancels what still runs. The
// slots go back through release, like any other: a queued request is woken for the freed slot
// and the slot gauges are updated; the breaker hears nothing (a crash says nothing of the engine).
func (s *requestSupervisor) cleanupAbnormalStop(ctx actor.Context) {
	if s.finalized {
		return
	}
	s.finalized = true
	s.x.Abort(errors.New("request supervisor crashed"))
	if s.phase != phaseStreaming {
		s.answer(ingress.Verdict{Status: 500, Body: fault.AppendErrorEnvelope(nil,
			fault.ErrorBody{Message: "internal error in the router", Type: "server_error", Code: "internal_error"})})
	}
	s.release(ctx, fault.PhasePrefill, nil, true)
	s.release(ctx, fault.PhaseDecode, nil, true)
	for _, f := range s.failures { // no judgment after a crash: each failure counts
		s.r.root.Send(f.engine.pid, f.report)
	}
	s.failures = nil
	s.status, s.outcome = 500, outcomeError
	s.r.requestDone(s)
}

func (s *requestSupervisor) timing() ingress.Timing {
	return ingress.Timing{TTFT: s.ttft, FirstByte: s.firstByte}
}

func (s *requestSupervisor) routing() ingress.Routing {
	r := ingress.Routing{Attempts: s.attempt}
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
	switch s.phase {
	case phaseRunning:
		leg, running, prefillStart := s.x.Progress()
		if running {
			st.Phase = leg.String()
		}
		if running && leg == fault.PhaseDecode {
			st.HandoffAgeS = time.Since(prefillStart).Seconds()
		}
	case phaseStreaming:
		st.HandoffAgeS = s.handoffAge.Seconds()
	}
	if (s.phase == phaseRunning || s.phase == phaseStreaming) && s.consumer != nil {
		st.Consumer = s.consumer.name
		if s.producer != nil {
			st.Producer = s.producer.name
		}
	}
	if s.held[fault.PhasePrefill] != nil {
		st.Reserved.Prefill = 1
	}
	if s.held[fault.PhaseDecode] != nil {
		st.Reserved.Decode = 1
	}
	return st
}
