package sim

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log"
	"net"
	"net/http"
	"slices"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/google/uuid"

	"github.com/narwhal-router/narwhal/bench/sim/blockhash"
	"github.com/narwhal-router/narwhal/bench/sim/tokenizer"
)

// Engine is one running simulated vLLM engine: an API listener and a KV side-channel
// listener. Create it with Start and stop it with Close.
type Engine struct {
	opts Options

	url        string // http://host:port of the API
	apiPort    int
	kvEndpoint string // host:port of the side channel, as advertised
	kvHost     string
	kvPort     int

	identity atomic.Pointer[string]   // engine id; Restart replaces it
	kvcfg    atomic.Pointer[kvConfig] // what the KV handshake compares that may change (handshake.go)
	dead     atomic.Bool
	// metricsFault bends /metrics for scrape tests (nil: none).
	metricsFault atomic.Pointer[MetricsFault]

	loras    *loraRegistry // the loaded LoRA adapters (lora.go)
	loraInfo loraInfo      // vllm:lora_requests_info's label sets

	tok    *tokenizer.Tokenizer
	hasher *blockhash.Hasher // this process's block hashes: NONE_HASH is per start

	blocks *blockTable
	// transfers wakes Mooncake pulls waiting for their prefill (mooncake.go).
	transfers transferWaits
	sched     *scheduler   // nil unless the capacity model is on (Options.MaxNumSeqs > 0)
	kvPub     *kvPublisher // nil unless Options.KVEvents is set
	ranks     []*rank      // the data-parallel ranks; ranks[0] has sched and kvPub (ranks.go)
	lb        balancer
	faults    faultQueue
	recorded  recorder
	count     counters
	kvClient  *http.Client

	// ctx is the base context of every request; Close cancels it so that hung and
	// streaming handlers return.
	ctx    context.Context
	cancel context.CancelFunc
	api    *http.Server
	kv     *http.Server
	serve  sync.WaitGroup // the two Serve loops and the scheduler
	conns  connTracker

	closeOnce sync.Once
	closeErr  error
}

// Start listens on o's addresses and serves until Close.
func Start(o Options) (*Engine, error) {
	o, err := o.normalized()
	if err != nil {
		return nil, fmt.Errorf("sim: %w", err)
	}
	e := &Engine{opts: o, blocks: newBlockTable(o.KVLease, o.BlockSize), kvClient: newKVClient(),
		loras: newLoRARegistry(o.LoRAModules, o.Models[0])}
	if e.tok, err = loadTokenizer(o); err != nil {
		return nil, fmt.Errorf("sim %s: %w", o.Name, err)
	}
	if e.hasher, err = blockhash.New(o.HashAlgo, o.HashSeed); err != nil {
		return nil, fmt.Errorf("sim %s: %w", o.Name, err)
	}
	if o.MaxNumSeqs > 0 {
		e.sched = newScheduler(o, func() { e.blocks.counts(time.Now()) })
	}
	if o.KVEvents != "" {
		if e.kvPub, err = startKVPublisher(o.KVEvents, o.KVEventsReplay, o.KVEventsTopic); err != nil {
			return nil, fmt.Errorf("sim %s: %w", o.Name, err)
		}
		e.sched.kv.events, e.sched.kv.blockSize = true, o.BlockSize
		e.sched.publish = e.kvPub.publish
	}
	if err = e.startRanks(); err != nil {
		e.closeKVEvents()
		return nil, fmt.Errorf("sim %s: %w", o.Name, err)
	}
	id := o.EngineID
	if id == "" {
		id = uuid.NewString()
	}
	e.identity.Store(&id)
	e.kvcfg.Store(&kvConfig{Version: o.Version, CacheDType: o.CacheDType})

	apiLn, err := net.Listen("tcp", o.Listen)
	if err != nil {
		e.closeKVEvents()
		return nil, fmt.Errorf("sim %s: listen api %s: %w", o.Name, o.Listen, err)
	}
	kvLn, err := net.Listen("tcp", o.KVEndpoint)
	if err != nil {
		apiLn.Close()
		e.closeKVEvents()
		return nil, fmt.Errorf("sim %s: listen kv %s: %w", o.Name, o.KVEndpoint, err)
	}
	var apiHost string
	apiHost, e.apiPort = advertised(apiLn.Addr())
	e.url = "http://" + net.JoinHostPort(apiHost, strconv.Itoa(e.apiPort))
	e.kvHost, e.kvPort = advertised(kvLn.Addr())
	e.kvEndpoint = net.JoinHostPort(e.kvHost, strconv.Itoa(e.kvPort))

	e.ctx, e.cancel = context.WithCancel(context.Background())
	e.api = e.newServer(e.apiRoutes())
	e.kv = e.newServer(e.kvRoutes())
	e.serve.Add(2)
	go e.run(e.api, apiLn)
	go e.run(e.kv, kvLn)
	if e.sched != nil {
		e.serve.Add(1)
		go func() {
			defer e.serve.Done()
			e.sched.run(e.ctx)
		}()
	}
	e.runRanks()
	return e, nil
}

func (e *Engine) newServer(h http.Handler) *http.Server {
	return &http.Server{
		Handler:     h,
		BaseContext: func(net.Listener) context.Context { return e.ctx },
		ConnState:   e.conns.track,
		ErrorLog:    log.New(io.Discard, "", 0),
	}
}

func (e *Engine) run(srv *http.Server, ln net.Listener) {
	defer e.serve.Done()
	_ = srv.Serve(ln) // returns http.ErrServerClosed after Close
}

// advertised turns a listener address into the host and port peers should dial:
// an unspecified address (0.0.0.0, ::) is advertised as 127.0.0.1.
func advertised(a net.Addr) (string, int) {
	tcp := a.(*net.TCPAddr)
	if tcp.IP == nil || tcp.IP.IsUnspecified() {
		return "127.0.0.1", tcp.Port
	}
	return tcp.IP.String(), tcp.Port
}

// Close stops both listeners, ends every request in flight (hung ones included) and
// returns once every goroutine the engine started has finished.
func (e *Engine) Close() error {
	e.closeOnce.Do(func() {
		e.conns.shutdown()
		e.cancel()
		e.closeErr = errors.Join(e.api.Close(), e.kv.Close())
		e.serve.Wait()
		e.conns.wait()
		e.closeErr = errors.Join(e.closeErr, e.closeKVEvents())
		e.kvClient.CloseIdleConnections()
		if e.closeErr != nil {
			e.closeErr = fmt.Errorf("sim %s: close: %w", e.opts.Name, e.closeErr)
		}
	})
	return e.closeErr
}

func (e *Engine) closeKVEvents() error {
	err := e.closeRanks()
	if e.kvPub == nil {
		return err
	}
	return errors.Join(err, e.kvPub.close())
}

// KVEvents returns the KV events' PUB and replay endpoints as bound (tcp://host:port),
// "" when they are off.
func (e *Engine) KVEvents() (pub, replay string) {
	if e.kvPub == nil {
		return "", ""
	}
	return e.kvPub.endpoints()
}

// Name returns the engine's name (Options.Name).
func (e *Engine) Name() string { return e.opts.Name }

// Role returns the engine's role.
func (e *Engine) Role() Role { return e.opts.Role }

// URL returns the API base URL, "http://127.0.0.1:port".
func (e *Engine) URL() string { return e.url }

// KVEndpoint returns the side channel's "host:port", the one descriptors advertise.
func (e *Engine) KVEndpoint() string { return e.kvEndpoint }

// EngineID returns the engine's current KV identity.
func (e *Engine) EngineID() string { return *e.identity.Load() }

// Models returns the served model names.
func (e *Engine) Models() []string { return slices.Clone(e.opts.Models) }

func (e *Engine) serves(model string) bool {
	_, adapter := e.loras.lookup(model)
	return slices.Contains(e.opts.Models, model) || adapter
}

// loraOf returns the adapter name and vLLM's lora_int_id (1-based, in --lora-modules
// order, then in load order) when model is a loaded LoRA adapter, else "", 0.
func (e *Engine) loraOf(model string) (string, int) {
	if a, ok := e.loras.lookup(model); ok {
		return a.name, a.id
	}
	return "", 0
}

// Requests returns the last requests the engine received, oldest first.
func (e *Engine) Requests() []RecordedRequest { return e.recorded.list() }

// ResetRecorded forgets the recorded requests.
func (e *Engine) ResetRecorded() { e.recorded.reset() }

// InjectFault makes the next count generations whose leg matches fault
// ("<leg>.<fault>[=<arg>]", the directive vocabulary) misbehave; count <= 0 means
// until ClearFaults.
func (e *Engine) InjectFault(fault string, count int) error {
	if err := e.faults.add(fault, count); err != nil {
		return fmt.Errorf("sim %s: inject: %w", e.opts.Name, err)
	}
	return nil
}

// ClearFaults removes every injected fault.
func (e *Engine) ClearFaults() { e.faults.clear() }

// Restart simulates a crash and restart of the engine process: a new engine id, every
// pinned block lost and, with the capacity model, the prefix cache emptied of the
// blocks no request holds. Requests in flight carry on.
func (e *Engine) Restart() {
	id := uuid.NewString()
	e.identity.Store(&id)
	e.blocks.dropAll()
	e.dropRankCaches()
	e.count.restarts.Add(1)
}

// SetDead makes /health answer 503 (dead) or 200.
func (e *Engine) SetDead(dead bool) { e.dead.Store(dead) }

// MetricsFault makes /metrics misbehave, for a router's scrape tests: Delay holds the
// answer back (the client may give up first), then Status, if not 0, replaces it with
// an error (vLLM's envelope).
type MetricsFault struct {
	Status int           `json:"status"`
	Delay  time.Duration `json:"-"`
}

// SetMetricsFault installs f, or clears it when f is nil.
func (e *Engine) SetMetricsFault(f *MetricsFault) { e.metricsFault.Store(f) }

// EngineInfo describes an engine in fleet listings and the command's output.
type EngineInfo struct {
	Name       string `json:"name"`
	Role       Role   `json:"role"`
	URL        string `json:"url"`
	EngineID   string `json:"engine_id"`
	KVEndpoint string `json:"kv_endpoint"`
	// KVEvents and KVEventsReplay are the KV events' endpoints, when published.
	KVEvents       string `json:"kv_events,omitempty"`
	KVEventsReplay string `json:"kv_events_replay,omitempty"`
}

// Info returns the engine's name, role, URL, engine id and KV endpoint.
func (e *Engine) Info() EngineInfo {
	pub, replay := e.KVEvents()
	return EngineInfo{Name: e.opts.Name, Role: e.opts.Role, URL: e.url, EngineID: e.EngineID(), KVEndpoint: e.kvEndpoint,
		KVEvents: pub, KVEventsReplay: replay}
}

// connTracker counts the connections of an engine's servers, so Close can wait for
// their goroutines: http.Server.Close closes connections but does not wait for the
// handlers running on them.
type connTracker struct {
	mu     sync.Mutex
	closed bool
	live   map[net.Conn]struct{}
	wg     sync.WaitGroup
}

func (t *connTracker) track(c net.Conn, s http.ConnState) {
	t.mu.Lock()
	defer t.mu.Unlock()
	switch s {
	case http.StateNew:
		if t.closed {
			c.Close()
			return
		}
		if t.live == nil {
			t.live = make(map[net.Conn]struct{})
		}
		t.live[c] = struct{}{}
		t.wg.Add(1)
	case http.StateClosed, http.StateHijacked:
		if _, ok := t.live[c]; ok {
			delete(t.live, c)
			t.wg.Done()
		}
	}
}

func (t *connTracker) shutdown() {
	t.mu.Lock()
	t.closed = true
	t.mu.Unlock()
}

func (t *connTracker) wait() { t.wg.Wait() }
