package cluster

import (
	"context"
	"crypto/rand"
	"crypto/tls"
	"encoding/hex"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"sync/atomic"
	"time"

	"github.com/asynkron/protoactor-go/cluster"
	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/narwhal-router/narwhal/config"
)

// startMu serialises protoactor's member start-up: it sets gRPC's process-wide logger, a data
// race when two nodes of one process (tests) start at once.
var startMu sync.Mutex

// verdictKey is the gossip key each node publishes its VerdictSet under.
const verdictKey = "narwhal.verdicts"

// Options are a Node's collaborators.
type Options struct {
	Logger *slog.Logger
	// ShutdownGrace is server.shutdown_grace_s: the deregistration when the node stops is
	// bounded by cluster.etcd.request_timeout_s, but never past it, so that a node with its
	// etcd gone still exits within its grace. 0 leaves it to the request timeout.
	ShutdownGrace time.Duration
	// OnVerdict receives each peer verdict that became the winner for its engine. It runs on
	// protoactor's gossip goroutine and must not block.
	OnVerdict func(Verdict)
}

// Node is this process's membership of the cluster. Its methods are safe for concurrent use;
// a nil *Node is a cluster of one (every method works and shares nothing).
type Node struct {
	cfg config.Cluster
	// name is this node's name (cluster.node_name, else advertise); advertise the address peers
	// reach it on (cluster.advertise, else bind); creds cluster.tls's credentials, nil without;
	// leaveTimeout bounds the deregistration when it stops (Options.ShutdownGrace).
	name, advertise string
	creds           *config.ClusterCredentials
	leaveTimeout    time.Duration
	// process is the id this process drew at start; it marks the verdicts it publishes.
	process string
	log     *slog.Logger
	on      atomic.Pointer[func(Verdict)]
	board   *board
	// faults is the test hook that cuts this node off (FaultFileEnv); nil in production.
	faults *faults
	// rejected counts heartbeats refused as unauthenticated or replayed (cluster.tls).
	rejected atomic.Int64
	// tls is the dialer's side of the cluster's mutual TLS; nil without cluster.tls.
	tls *tls.Config
	// etcd is the node's etcd client (provider etcd), shared by its incarnations' memberships
	// (etcdMembers).
	etcd *clientv3.Client

	push     chan struct{} // a local verdict to send now
	rejoiner chan rejoinRequest
	done     chan struct{}
	wg       sync.WaitGroup

	// tick is the watchdog's last tick, as monotonic time since epoch: older than
	// suspect_after_s means a stall is under way that the watchdog has not run to notice yet.
	epoch time.Time
	tick  atomic.Int64
	// joining is set while a join runs (at most one at a time).
	joining atomic.Bool

	mu          sync.Mutex
	inc         *incarnation
	generation  int
	lastRejoin  time.Time
	rejoinWhy   string
	fencedUntil time.Time
	stalls      int
	members     []*cluster.Member
	lastGossip  map[string]time.Time // member id → last gossip update heard from it
	startErr    string
}

// Start joins the cluster described by cfg. A node that cannot join yet (an unreachable etcd)
// still starts: it keeps retrying in the background and meanwhile routes on its own view.
func Start(cfg config.Cluster, opts Options) (*Node, error) {
	if !cfg.Enabled {
		return nil, nil
	}
	creds, err := cfg.TLS.Load() // validated: read once more, now for good
	if err != nil {
		return nil, fmt.Errorf("cluster.tls: %w", err)
	}
	leave := cfg.Etcd.RequestTimeoutS.Duration()
	if opts.ShutdownGrace > 0 {
		leave = min(leave, opts.ShutdownGrace)
	}
	process := newProcessID()
	n := &Node{cfg: cfg, name: cfg.Node(), advertise: cfg.AdvertiseAddr(), creds: creds, leaveTimeout: leave, process: process, log: opts.Logger,
		board: newBoard(cfg.Node(), process, cfg.VerdictTTLS.Duration()),
		push:  make(chan struct{}, 1), rejoiner: make(chan rejoinRequest, 1), done: make(chan struct{}),
		lastGossip: map[string]time.Time{}, epoch: time.Now(), faults: startFaults()}
	n.tls = n.clientTLS()
	if n.log == nil {
		n.log = slog.New(slog.DiscardHandler)
	}
	n.log = n.log.With("component", "cluster", "node", n.name, "process", process)
	if opts.OnVerdict != nil {
		n.on.Store(&opts.OnVerdict)
	}
	if cfg.Provider == config.ProviderEtcd {
		client, err := clientv3.New(etcdClientConfig(cfg)) // it does not wait for etcd
		if err != nil {
			return nil, fmt.Errorf("cluster.etcd: %w", err)
		}
		n.etcd = client
	}
	// Wait a bounded time for the first join, so that a node normally has the live verdicts
	// before it serves; a membership service that does not answer (protoactor's etcd provider
	// waits on it without a deadline) must not keep the node from routing.
	select {
	case err := <-n.startJoin():
		var bind *bindError
		if errors.As(err, &bind) {
			return nil, err // a port we cannot listen on will not fix itself
		}
		if err != nil {
			n.log.Warn("cluster not joined yet; routing on this node's own view and retrying", "error", err)
		}
	case <-time.After(firstJoinWait):
		n.log.Warn("cluster not joined yet (the membership provider has not answered); routing on this node's own view meanwhile",
			"waited", firstJoinWait.String())
	}
	n.wg.Add(2)
	go n.loop()
	go n.watchdog()
	return n, nil
}

// newProcessID draws the id that tells this process's verdicts from those of the node's
// earlier (or later) processes under the same name.
func newProcessID() string {
	var b [8]byte
	rand.Read(b[:])
	return hex.EncodeToString(b[:])
}

func (n *Node) current() *incarnation {
	n.mu.Lock()
	defer n.mu.Unlock()
	return n.inc
}

func (n *Node) memberID() string {
	if inc := n.current(); inc != nil {
		return inc.system.ID
	}
	return ""
}

// Name is this node's name.
func (n *Node) Name() string {
	if n == nil {
		return ""
	}
	return n.name
}

// Close leaves the cluster: peers drop this node at once (etcd) or after
// cluster.suspect_after_s (static).
func (n *Node) Close() {
	if n == nil {
		return
	}
	select {
	case <-n.done:
		return
	default:
	}
	close(n.done)
	n.wg.Wait()
	n.leave(false)
	n.faults.stop()
	if n.etcd != nil {
		n.etcd.Close()
	}
}

// warnOnly keeps protoactor's cluster logs to warnings and errors: it logs every gossip
// state change at info.
type warnOnly struct{ slog.Handler }

func (h warnOnly) Enabled(ctx context.Context, l slog.Level) bool {
	return l >= slog.LevelWarn && h.Handler.Enabled(ctx, l)
}
func (h warnOnly) Handle(ctx context.Context, r slog.Record) error {
	if alreadyClosed(r) {
		return nil
	}
	return h.Handler.Handle(ctx, r)
}
func (h warnOnly) WithAttrs(a []slog.Attr) slog.Handler { return warnOnly{h.Handler.WithAttrs(a)} }
func (h warnOnly) WithGroup(g string) slog.Handler      { return warnOnly{h.Handler.WithGroup(g)} }
