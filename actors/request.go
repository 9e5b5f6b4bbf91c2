package actors

import (
	"errors"
	"log/slog"
	"sync/atomic"
	"time"

	"github.com/asynkron/protoactor-go/actor"
	"github.com/google/uuid"

	"github.com/narwhal-router/narwhal/actors/health"
	"github.com/narwhal-router/narwhal/actors/placement"
	"github.com/narwhal-router/narwhal/cluster"
	"github.com/narwhal-router/narwhal/config"
	"github.com/narwhal-router/narwhal/messages"
	"github.com/narwhal-router/narwhal/transport/fault"
	"github.com/narwhal-router/narwhal/transport/ingress"
	"github.com/narwhal-router/narwhal/transport/telemetry"
	"github.com/narwhal-router/narwhal/transport/tokenize"
	"github.com/narwhal-router/narwhal/transport/wire"
)

// The request supervisor, one per client request, is written by capability:
//
//	request.go    the supervisor: its state, its mailbox, the start of each attempt
//	attempt.go    placement of an attempt (engines, slots, the plan ingress runs) and its report
//	disagg.go     the bookkeeping of the disaggregation decision (placement makes it)
//	admission.go  waiting in the admission queue for a slot
//	retry.go      a failed attempt: retry or answer (health.RetryAsk decides)
//	blame.go      what each leg's end tells its engine's breaker (health.Leg.News decides)
//	blameboard.go the blame board's actor (health.Board compares failures before any is counted)
//	answer.go     the answer before commit (errors, rejections, the headers they carry)
//	cleanup.go    releasing slots, the request's one outcome, a crashed supervisor's cleanup

// stage is where a request stands in its life.
type stage uint8

const (
	stagePlacing   stage = iota // choosing engines and taking their slots
	stageQueued                 // waiting for an engine to free a slot
	stageRunning                // ingress runs the planned attempt (prefill, then decode)
	stageStreaming              // committed: the data plane relays the stream
	stageDone
)

var stageNames = [...]string{"placing", "queued", "running", "streaming", "done"}

func (s stage) String() string { return stageNames[s] }

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

// requestEnv is what request supervisors use of the router, and all they use: one value per
// router, shared by every supervisor. The router builds it; nothing in it changes after start
// but what each field names as its writer.
type requestEnv struct {
	// fleet is the engines placement reads. Writer: the pool (Publish, a new snapshot per
	// change); a supervisor loads it once per placement.
	fleet *placement.Fleet
	// settings are the run-time-changeable settings; a reload swaps them whole. Writer: the
	// router's reload; a supervisor loads them once per request.
	settings atomic.Pointer[settings]

	root *actor.RootContext
	// pool is the pool's PID. Writer: the guardian, once, when the pool starts (before any
	// request arrives).
	pool    *actor.PID
	metrics *telemetry.Metrics
	log     *slog.Logger
	access  *accessLog // nil: no access log
	tokens  *tokenize.Tokenizer
	cluster *cluster.Node

	// board is the blame board (blameboard.go). Writer: the guardian, once, when it starts.
	board *actor.PID
	// commits are the fingerprints that committed lately, the evidence the board reads that a
	// request is not failing everywhere. Writers: the request supervisors, at commit.
	commits health.CommitTable
	// live is every started request supervisor. Writers: the supervisors, each adding itself
	// when its request arrives and removing itself when it stops.
	live *liveSet
	// queued is the admission queue's depth: a released slot is worth a message to the pool
	// only while requests wait. Writer: the pool.
	queued atomic.Int32
	// rates are the fleet's measured prefill rates, the disaggregation prediction's inputs
	// (placement.Rates). Writers: the request supervisors, at commit (measureCommit).
	rates placement.Rates
}

// current is the settings requests arriving now run with.
func (env *requestEnv) current() *settings { return env.settings.Load() }

// settings are what a request reads of the configuration, as one immutable value: a supervisor
// loads it once, when its request arrives, and keeps it for the request's life, so a reload
// changes what requests arriving after it do, never one in flight.
type settings struct {
	request config.RequestRuntime
	// fleet is the disaggregation and placement rules; exposeEngineErrors is
	// server.expose_engine_errors (the answer's body).
	fleet              config.FleetRuntime
	exposeEngineErrors bool
	budget             *health.RetryBudget
	// recovery is recovery.* (the blame window, the backpressure bound).
	recovery config.RecoveryRuntime
	// defaultOutput is flow_control.default_output_tokens: a request's expected output when it
	// sets no bound, for its cost in the admission queue.
	defaultOutput int
}

// newSettings reads rt's request settings; prev (nil at start) lends its retry budget, and the
// history it counts, when the budget's configuration did not change.
func newSettings(rt config.Config, prev *settings) *settings {
	s := &settings{request: rt.RequestRuntime(), fleet: rt.FleetRuntime(), exposeEngineErrors: rt.Server.ExposeEngineErrors,
		recovery: rt.RecoveryRuntime(), defaultOutput: rt.FlowControl.DefaultOutputTokens}
	if prev != nil && prev.budget.Config() == rt.RecoveryRuntime().RetryBudget {
		s.budget = prev.budget
	} else {
		s.budget = health.NewRetryBudget(rt.RecoveryRuntime().RetryBudget)
	}
	return s
}

// requestSupervisor owns one client request from admission to cleanup: placement and the phase
// reservations, each attempt's plan, handoff policy, retries, the answer before commit, and
// the release of everything it holds. It decides; the request's own ingress goroutine carries
// each planned attempt out (prefill, handoff checks, decode to the first token) and reports
// back, so a request costs a handful of messages and never a goroutine per leg. The
// supervisor never blocks: a hang-up, a timer or a shutdown is handled the moment it arrives.
type requestSupervisor struct {
	env  *requestEnv
	set  *settings // the settings the request arrived with
	x    *ingress.Exchange
	self *actor.PID

	stage      stage
	attempt    int
	backendID  string
	producer   *placement.Engine
	consumer   *placement.Engine
	held       [2]*placement.Engine // the slot held per phase
	ranks      [2]*placement.Rank   // the data-parallel rank of each held slot (nil: the engine has one)
	full       []string             // engines found full this placement round
	avoid      []string             // engines that failed this request: used only if nothing else can serve
	exclude    []string             // engines that pushed back (429/503): never retried for this request
	replanned  bool                 // the request had its one attempt past max_attempts (fault.Replans)
	frontOfQ   bool
	queueTimer *time.Timer
	// queuedSince is when the placement round first queued the request (zero: not yet).
	queuedSince time.Time

	// prompt is the prompt as placement reads it (computed once); decision the last placement's
	// disaggregation decision, prefixMatch the consumer's prefix-index match in blocks.
	prompt      wire.Prompt
	prompted    bool
	decision    placement.Decision
	prefixMatch int
	// predictedCached is the prompt tokens placement predicted the computing engine holds
	// (tokens.go).
	predictedCached int
	// predicted is the decision's predicted times to first token (placement.AttemptPlan);
	// leg the attempt's prompt work, measured at commit; localHeld the tokens counted in the
	// consumer's LocalTokens for a local decode, until its first token.
	predicted placement.Prediction
	leg       placement.ComputeLeg
	localHeld int64

	gone      bool // the client hung up
	answered  bool // ingress got its final command
	finalized bool

	// measurements, all from x.Arrival
	ttft, firstByte, handoffAge time.Duration
	decodeStart                 time.Time
	lastFault                   *fault.Fault
	// ended are this request's leg ends before commit that have something to tell a breaker,
	// held until the request's fate decides whom they blame (blame.go).
	ended []legEnd
	// fingerprint identifies the request's body for the blame board (health.Fingerprint).
	fingerprint uint64
	end         ingress.StreamFinished
	status      int
	outcome     string
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
		s.set = s.env.current()
		s.fingerprint = health.Fingerprint(m.Body.Raw()) // now: ingress releases the body once the request commits
		s.env.live.add(s.self)                           // here, not in Dispatch: a fast failure could retire first
		s.set.budget.Deposit(time.Now())
		s.startAttempt(ctx)
	case *ingress.AttemptEnded:
		s.onAttemptEnded(ctx, m)
	case *ingress.StreamFinished:
		s.onStreamFinished(ctx, m)
	case *messages.ClientGone:
		s.onClientGone(ctx)
	case *messages.Abort:
		s.abort(ctx)
	case *messages.CapacityAvailable:
		s.onCapacityAvailable(ctx, m)
	case *messages.QueueFull:
		s.onQueueFull(ctx, m)
	case *messages.QueueTimeout:
		s.onQueueTimeout(ctx)
	case *messages.Describe:
		ctx.Respond(s.snapshot())
	case *actor.Stopped:
		if s.x != nil { // nil only for a supervisor stopped before Dispatch's message, which holds nothing
			s.cleanupAbnormalStop(ctx)
		}
	}
}

// startAttempt begins a fresh attempt: a new backend request ID, a new placement.
func (s *requestSupervisor) startAttempt(ctx actor.Context) {
	s.attempt++
	s.backendID = uuid.NewString()
	s.full = s.full[:0]
	s.queuedSince = time.Time{}
	s.place(ctx)
}

func (s *requestSupervisor) onClientGone(ctx actor.Context) {
	if s.gone || s.stage == stageDone {
		return
	}
	s.gone = true
	s.x.Abort(fault.ErrClientGone)
	if s.stage == stageQueued {
		s.leaveQueue(ctx)
		s.finishGone(ctx)
	}
	// Running: the aborted attempt reports back, and finishes. Streaming: the relay sees the
	// cancelled stream and reports StreamFinished.
}

// abort cancels the request for a router shutdown: a running attempt fails with the cause and
// is answered 503; a queued request is answered here.
func (s *requestSupervisor) abort(ctx actor.Context) {
	s.x.Abort(errShutdown)
	if s.stage == stageQueued {
		s.leaveQueue(ctx)
		s.respondShutdown(ctx)
	}
}

// snapshot is the supervisor's state for the tree dump.
func (s *requestSupervisor) snapshot() *messages.RequestState {
	st := &messages.RequestState{
		ID: s.x.ID, Endpoint: s.x.Body.Endpoint.String(), Model: s.x.Body.Model, Phase: s.stage.String(),
		Attempt: s.attempt, ElapsedS: time.Since(s.x.Arrival).Seconds(),
	}
	switch s.stage {
	case stageRunning:
		leg, running, prefillStart := s.x.Progress()
		if running {
			st.Phase = leg.String()
		}
		if running && leg == fault.PhaseDecode {
			st.HandoffAgeS = time.Since(prefillStart).Seconds()
		}
	case stageStreaming:
		st.HandoffAgeS = s.handoffAge.Seconds()
	}
	if (s.stage == stageRunning || s.stage == stageStreaming) && s.consumer != nil {
		st.Consumer = s.consumer.Name
		if s.producer != nil {
			st.Producer = s.producer.Name
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
