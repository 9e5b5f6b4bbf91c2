package cluster

import (
	"context"
	"crypto/rand"
	"crypto/tls"
	"encoding/hex"
	"errors"
	"fmt"
	"hash/fnv"
	"io"
	"log/slog"
	"net"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/asynkron/protoactor-go/actor"
	"github.com/asynkron/protoactor-go/cluster"
	"github.com/asynkron/protoactor-go/cluster/identitylookup/disthash"
	"github.com/asynkron/protoactor-go/eventstream"
	"github.com/asynkron/protoactor-go/remote"
	clientv3 "go.etcd.io/etcd/client/v3"
	"google.golang.org/grpc"

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

// incarnation is one membership of the cluster under one member identity: an actor system of
// its own (protoactor ties the identity to the system), its remote, provider and gossip.
type incarnation struct {
	system   *actor.ActorSystem
	cl       *cluster.Cluster
	provider cluster.ClusterProvider
	static   *staticProvider
	sub      *eventstream.Subscription
	started  time.Time
	// retired is set when the incarnation is being replaced: its remote dials nothing more.
	retired atomic.Bool
}

var (
	errRetired = errors.New("this cluster incarnation has been replaced")
	errStalled = errors.New("this node has just resumed from a stall; its cluster identity is being replaced")
)

// dialer makes the incarnation's connections to peers, and keeps an incarnation that is done
// from sending anything:
//   - once it is retired it dials nothing more. protoactor's endpoint writers retry a failed
//     connection after 2 s, and one that connects publishes an event that makes its endpoint
//     manager spawn another writer for the address, whose closing ends the next: a retired
//     incarnation's writers, left to reconnect when a partition heals, churned through dozens
//     of connections to the peers.
//   - while this process has just resumed from a stall that the watchdog has not yet seen, it
//     neither dials nor writes (a write closes the connection). Peers have dropped this
//     identity; its gossip tick, racing the watchdog, would still make them answer it, and a
//     peer's new connection for that answer lands on the server about to be stopped — the
//     peer then waits protoactor's 2 s retry before it reaches the next incarnation.
func (inc *incarnation) dialer(n *Node, dial func(context.Context, string) (net.Conn, error)) func(context.Context, string) (net.Conn, error) {
	return func(ctx context.Context, addr string) (net.Conn, error) {
		if err := inc.mute(n); err != nil {
			return nil, err
		}
		c, err := dial(ctx, addr)
		if err != nil {
			return nil, err
		}
		return &guardedConn{Conn: c, inc: inc, n: n}, nil
	}
}

// mute says why the incarnation must not send now, if it must not.
func (inc *incarnation) mute(n *Node) error {
	if inc.retired.Load() {
		return errRetired
	}
	if n.stallUnseen() {
		return errStalled
	}
	return nil
}

// guardedConn is a connection to a peer that closes instead of writing when its incarnation
// must not send (incarnation.dialer).
type guardedConn struct {
	net.Conn
	inc *incarnation
	n   *Node
}

func (c *guardedConn) Write(b []byte) (int, error) {
	if err := c.inc.mute(c.n); err != nil {
		c.Conn.Close()
		return 0, err
	}
	return c.Conn.Write(b)
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

type bindError struct{ err error }

func (e *bindError) Error() string { return e.err.Error() }
func (e *bindError) Unwrap() error { return e.err }

// join starts a new incarnation. protoactor panics where it could return errors (a port in
// use, a provider that cannot start), so the panic is turned back into an error here.
func (n *Node) join() (err error) {
	host, portS, _ := net.SplitHostPort(n.cfg.Bind)
	port, _ := strconv.Atoi(portS)
	// Fail early and clearly on a port that is taken (protoactor would panic in a goroutine).
	if ln, lerr := net.Listen("tcp", n.cfg.Bind); lerr != nil {
		return &bindError{fmt.Errorf("cluster.bind %s: %w", n.cfg.Bind, lerr)}
	} else {
		ln.Close()
	}
	if n.cfg.Provider == config.ProviderStatic { // heartbeats use the same port over UDP
		if pc, perr := net.ListenPacket("udp", n.cfg.Bind); perr != nil {
			return &bindError{fmt.Errorf("cluster.bind %s (UDP, for heartbeats): %w", n.cfg.Bind, perr)}
		} else {
			pc.Close()
		}
	}
	logger := n.log
	system := actor.NewActorSystem(actor.WithLoggerFactory(func(*actor.ActorSystem) *slog.Logger {
		return slog.New(warnOnly{logger.Handler()}).With("lib", "protoactor")
	}))
	inc := &incarnation{system: system}
	switch n.cfg.Provider {
	case config.ProviderEtcd:
		if err := etcdAnswers(n.etcd, n.cfg); err != nil {
			system.Shutdown()
			return err
		}
		inc.provider = newEtcdMembers(n)
	default:
		inc.static = newStaticProvider(n)
		inc.provider = inc.static
	}
	serverCreds, dialCreds := n.credentials()
	ropts := []remote.ConfigOption{remote.WithAdvertisedHost(n.advertise),
		// The default pre-allocates a million-slot queue per peer (~16 MiB).
		remote.WithEndpointWriterQueueSize(4096), remote.WithEndpointManagerQueueSize(4096),
		remote.WithDialOptions(grpc.WithTransportCredentials(dialCreds), grpc.WithContextDialer(inc.dialer(n, n.faults.dialer(n.dialPeer))),
			grpc.WithStreamInterceptor(closeFailedConnects)),
		remote.WithServerOptions(grpc.Creds(n.faults.serverCreds(serverCreds)))}
	rc := remote.Configure(host, port, ropts...)
	cc := cluster.Configure(n.cfg.Name, inc.provider, disthash.New(), rc,
		cluster.WithHeartbeatExpiration(max(20*time.Second, 4*n.cfg.SuspectAfterS.Duration())))
	cc.GossipInterval = n.cfg.GossipIntervalS.Duration()
	inc.cl = cluster.New(system, cc)
	inc.sub = system.EventStream.Subscribe(func(evt any) { n.event(inc, evt) })
	defer func() {
		if r := recover(); r != nil {
			err = fmt.Errorf("start cluster member: %v", r)
			inc.provider.Shutdown(false)
			if inc.cl.Remote != nil {
				inc.cl.Shutdown(false) // the remote may hold the port already
			} else {
				system.Shutdown()
			}
		}
	}()
	startMu.Lock()
	defer startMu.Unlock()
	inc.cl.StartMember()
	inc.started = time.Now()
	select {
	case <-n.done: // the node closed while this join ran
		inc.retire(nil, n.leaveTimeout)
		return errors.New("node closed")
	default:
	}
	n.mu.Lock()
	n.inc = inc
	n.generation++
	n.startErr = ""
	n.mu.Unlock()
	n.log.Info("joined the cluster", "member_id", system.ID, "address", n.advertise, "provider", n.cfg.Provider)
	n.sendNow()
	return nil
}

// leave ends the current incarnation; rejoining waits until its port is free for the next.
func (n *Node) leave(rejoining bool) {
	n.mu.Lock()
	inc := n.inc
	n.inc = nil
	members := n.members
	n.members = nil
	n.mu.Unlock()
	if inc == nil {
		return
	}
	within := n.cfg.Etcd.RequestTimeoutS.Duration()
	if !rejoining {
		within = n.leaveTimeout
	}
	inc.retire(members, within)
	if rejoining {
		waitPortFree(n.cfg.Bind, 3*time.Second)
	}
}

// retire ends an incarnation for good, without protoactor's graceful shutdown: at the pinned
// version Remote.Shutdown(true) can panic the process — it sends on each incoming stream's
// disconnect channel, and a stream that a peer is closing at that moment has closed its
// channel already ("send on closed channel" in endpointManager.stop, seen after stalls and
// partitions, when peers' streams are being reset) — and it can hang 10 s on a peer that
// connected while it was suspending. Instead, in an order that leaves nothing behind:
//  0. its remote dials nothing more (incarnation.dialer);
//  1. membership stops (no heartbeats, no registration refresh) and its events are ignored;
//     an etcd registration is deleted if etcd answers within `within` (the lease ends it
//     otherwise);
//  2. gossip stops, so the old actor system sends nothing more;
//  3. the gRPC server stops at once: its listener closes (the port is free for the next
//     incarnation) and every peer's stream into it is cut, so each peer drops its endpoint for
//     this address and dials afresh on its next message — the next incarnation, not the old;
//  4. this incarnation's own connections to peers close (protoactor's endpoint-terminated
//     event, per member address), so neither side keeps a stream to a dead identity;
//  5. the actor system stops. Only protoactor's log-throttle timers still hold it, each for
//     at most its 60 s period; then its memory (about 3 MB) is released.
func (inc *incarnation) retire(members []*cluster.Member, within time.Duration) {
	inc.retired.Store(true)
	inc.system.EventStream.Unsubscribe(inc.sub)
	if inc.static != nil {
		inc.provider.Shutdown(false) // local: it stops at once
	} else {
		stopProvider(inc.provider, within)
	}
	addrs := map[string]bool{}
	for _, m := range members {
		addrs[m.Address()] = true
	}
	if inc.static != nil {
		for _, a := range inc.static.addresses() {
			addrs[a] = true
		}
	}
	delete(addrs, inc.system.Address())
	inc.cl.Gossip.Shutdown()
	inc.cl.Remote.Shutdown(false)
	for a := range addrs {
		inc.system.EventStream.Publish(&remote.EndpointTerminatedEvent{Address: a})
	}
	inc.system.Shutdown()
}

// stopProvider stops membership, waiting at most within for it: protoactor's etcd provider
// deletes its registration there, a request that etcd's client bounds (requestDeadline) but
// that may be cut shorter here (a node stopping within its grace). Left running, it ends
// within the request timeout.
func stopProvider(p cluster.ClusterProvider, within time.Duration) {
	done := make(chan struct{})
	go func() {
		defer close(done)
		p.Shutdown(false)
	}()
	t := time.NewTimer(within)
	defer t.Stop()
	select {
	case <-done:
	case <-t.C:
	}
}

// peerRedialWait bounds how long a connection to a peer's cluster port keeps being retried
// while the port refuses or resets it: the moment a peer that rejoins swaps incarnations on the
// same port.
const peerRedialWait = 2 * time.Second

// dialPeer connects to a peer's cluster port for protoactor's remote, and hands the connection
// over only once the peer's gRPC server has spoken (it sends its HTTP/2 settings first). A
// refused connection, or one reset before the server spoke — it landed in the backlog of the
// old incarnation's listener as that closed — is retried every 20 ms for up to
// peerRedialWait. protoactor's own retry, after a failed connection, waits 2 s: the wait a
// rejoined node would otherwise have before it hears the verdicts it missed.
//
// With cluster.tls the TLS handshake is made here, so that its answer is the server's first
// word: the connection gRPC gets is already authenticated and encrypted (credentials).
func dialPeer(ctx context.Context, addr string, tlsConfig *tls.Config) (net.Conn, error) {
	deadline := time.Now().Add(peerRedialWait)
	var d net.Dialer
	for {
		c, err := d.DialContext(ctx, "tcp", addr)
		if err == nil && tlsConfig != nil {
			tc := tls.Client(c, tlsConfig)
			hctx, cancel := context.WithDeadline(ctx, deadline)
			if err = tc.HandshakeContext(hctx); err == nil {
				cancel()
				return tc, nil
			}
			cancel()
			c.Close()
			if !redialable(err) {
				return nil, fmt.Errorf("TLS handshake with peer %s: %w", addr, err)
			}
		} else if err == nil {
			if c, err = serverSpoke(c, deadline); err == nil {
				return c, nil
			}
		}
		if !redialable(err) || time.Now().After(deadline) {
			return nil, err
		}
		select {
		case <-ctx.Done():
			return nil, ctx.Err()
		case <-time.After(20 * time.Millisecond):
		}
	}
}

// redialable reports whether a failed connection says the port is between listeners.
func redialable(err error) bool {
	return errors.Is(err, syscall.ECONNREFUSED) || errors.Is(err, syscall.ECONNRESET) ||
		errors.Is(err, syscall.EPIPE) || errors.Is(err, io.EOF)
}

// serverSpoke waits until the first bytes from the server arrive (or until deadline: a slow
// server is left to gRPC's own handshake) and returns the connection with them put back.
func serverSpoke(c net.Conn, deadline time.Time) (net.Conn, error) {
	buf := make([]byte, 512)
	c.SetReadDeadline(deadline)
	n, err := c.Read(buf)
	c.SetReadDeadline(time.Time{})
	if n == 0 && err != nil {
		var ne net.Error
		if errors.As(err, &ne) && ne.Timeout() {
			return c, nil
		}
		c.Close()
		return nil, fmt.Errorf("peer %s closed the connection before its server spoke: %w", c.RemoteAddr(), err)
	}
	return &spokenConn{Conn: c, first: buf[:n]}, nil
}

// spokenConn replays the server's first bytes before reading on.
type spokenConn struct {
	net.Conn
	first []byte
}

func (c *spokenConn) Read(b []byte) (int, error) {
	if len(c.first) > 0 {
		n := copy(b, c.first)
		c.first = c.first[n:]
		return n, nil
	}
	return c.Conn.Read(b)
}

// waitPortFree waits until addr can be listened on again (TCP), or the timeout passes.
func waitPortFree(addr string, timeout time.Duration) {
	deadline := time.Now().Add(timeout)
	for {
		ln, err := net.Listen("tcp", addr)
		if err == nil {
			ln.Close()
			return
		}
		if time.Now().After(deadline) {
			return
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// event handles the cluster's own events: peers' verdict sets and topology changes.
func (n *Node) event(inc *incarnation, evt any) {
	switch e := evt.(type) {
	case *cluster.GossipUpdate:
		if e.MemberID == inc.system.ID {
			return
		}
		n.mu.Lock()
		n.lastGossip[e.MemberID] = time.Now()
		n.mu.Unlock()
		if e.Key != verdictKey || e.Value == nil {
			return
		}
		var set VerdictSet
		if err := e.Value.UnmarshalTo(&set); err != nil {
			n.log.Warn("peer verdicts unreadable", "member_id", e.MemberID, "error", err)
			return
		}
		changed := n.board.receive(e.MemberID, &set, time.Now())
		if on := n.on.Load(); on != nil {
			for _, v := range changed {
				(*on)(v)
			}
		}
	case *cluster.ClusterTopology:
		n.mu.Lock()
		if n.inc == inc || n.inc == nil {
			n.members = e.Members
		}
		n.mu.Unlock()
		for _, m := range e.Joined {
			if m.Id != inc.system.ID {
				n.log.Info("cluster member joined", "member_id", m.Id, "address", m.Address())
			}
		}
		for _, m := range e.Left {
			n.log.Info("cluster member left", "member_id", m.Id, "address", m.Address())
		}
		if len(e.Joined) > 0 {
			// A member that joins late gets the whole gossip state; pushing now only makes it
			// arrive without waiting for the next tick.
			n.sendNow()
		}
	}
}

// Attach makes f the receiver of peers' verdicts and hands it, at once, every live verdict a
// peer decided: what arrived before the engine actors existed is not lost.
func (n *Node) Attach(f func(Verdict)) {
	if n == nil {
		return
	}
	n.on.Store(&f)
	for _, v := range n.board.view(time.Now()) {
		if !n.board.mine(v) {
			f(v)
		}
	}
}

// Own reports whether this process published v. A verdict under this node's name from its
// previous process (before a restart) is a peer's: this process applies it.
func (n *Node) Own(v Verdict) bool {
	return n != nil && n.board.mine(v)
}

// newProcessID draws the id that tells this process's verdicts from those of the node's
// earlier (or later) processes under the same name.
func newProcessID() string {
	var b [8]byte
	rand.Read(b[:])
	return hex.EncodeToString(b[:])
}

// handLapsing hands the engine actors the verdicts no process publishes any more
// (board.lapsing): a node that still holds an engine out on one re-owns it.
func (n *Node) handLapsing(now time.Time) {
	on := n.on.Load()
	if on == nil {
		return
	}
	for _, v := range n.board.lapsing(now) {
		(*on)(v)
	}
}

// Publish shares a decision this node made about an engine: it is on the board at once and on
// its way to every peer now, not at the next gossip tick.
func (n *Node) Publish(v Verdict) {
	if n == nil {
		return
	}
	n.board.decide(v, time.Now())
	n.sendNow()
}

func (n *Node) sendNow() {
	select {
	case n.push <- struct{}{}:
	default:
	}
}

// rejoinRequest asks for a new incarnation because the one named is no longer accepted.
type rejoinRequest struct {
	memberID string
	why      string
}

// rejoin asks the loop to replace the incarnation memberID with a new one. A request about an
// incarnation already replaced is dropped by the loop: it was late news. The newest request
// wins over one still waiting.
func (n *Node) rejoin(memberID, why string) {
	// The incarnation is done: from now on it sends nothing (incarnation.dialer), so that peers,
	// which have dropped it, have nothing to answer while it is being replaced.
	if inc := n.current(); inc != nil && inc.system.ID == memberID {
		inc.retired.Store(true)
	}
	req := rejoinRequest{memberID, why}
	for {
		select {
		case n.rejoiner <- req:
			return
		default:
		}
		select {
		case <-n.rejoiner: // an older request makes way
		default:
		}
	}
}

// watchdog notices that this process did not run for longer than peers wait for it (stopped,
// a frozen VM, starved): they have dropped its identity, and the legs that were in flight timed
// out through no engine's fault. It fences the node — failure verdicts are held back until the
// stall's timeouts have drained — and asks for a rejoin under a new identity.
func (n *Node) watchdog() {
	defer n.wg.Done()
	t := time.NewTicker(100 * time.Millisecond)
	defer t.Stop()
	suspect := n.cfg.SuspectAfterS.Duration()
	last := time.Now()
	for {
		select {
		case <-n.done:
			return
		case <-t.C:
		}
		now := time.Now()
		gap := now.Sub(last)
		last = now
		if gap > suspect {
			// Fenced and muted before the tick says the process runs again (stallUnseen).
			n.mu.Lock()
			n.stalls++
			n.fencedUntil = now.Add(suspect + n.cfg.GossipIntervalS.Duration())
			n.mu.Unlock()
			n.rejoin(n.memberID(), "stalled for "+gap.Round(time.Millisecond).String())
			n.log.Warn("this node stalled; fencing it and rejoining the cluster", "stall", gap.String())
		}
		n.tick.Store(int64(now.Sub(n.epoch)))
	}
}

// loop publishes, re-publishes, watches for stalls and rejoins, one thing at a time.
func (n *Node) loop() {
	defer n.wg.Done()
	republish := time.NewTicker(n.cfg.RepublishIntervalS.Duration())
	defer republish.Stop()
	retry := time.NewTicker(n.cfg.SuspectAfterS.Duration())
	defer retry.Stop()
	for {
		select {
		case <-n.done:
			return
		case <-n.push:
			n.send()
		case <-republish.C:
			n.handLapsing(time.Now())
			n.board.forget(time.Now())
			n.forgetGossip()
			n.send()
		case <-retry.C:
			if n.current() == nil && !n.joining.Load() {
				n.startJoin()
			}
		case r := <-n.rejoiner:
			if r.memberID == n.memberID() {
				n.doRejoin(r.why)
			}
		}
	}
}

// firstJoinWait bounds how long Start waits for the first join.
const firstJoinWait = 5 * time.Second

// startJoin starts a join unless one is under way, and delivers its result. A join may hang
// (an unreachable etcd); while it does, no other starts.
func (n *Node) startJoin() <-chan error {
	res := make(chan error, 1)
	if !n.joining.CompareAndSwap(false, true) {
		res <- errors.New("a join is under way")
		return res
	}
	go func() {
		defer n.joining.Store(false)
		err := n.join()
		if err != nil {
			n.mu.Lock()
			n.startErr = err.Error()
			n.mu.Unlock()
		}
		res <- err
	}()
	return res
}

func (n *Node) doRejoin(why string) {
	n.mu.Lock()
	n.lastRejoin, n.rejoinWhy = time.Now(), why
	n.mu.Unlock()
	n.log.Info("rejoining the cluster under a new member identity", "reason", why)
	n.leave(true)
	n.startJoin() // the retry tick tries again if it fails
}

func (n *Node) current() *incarnation {
	n.mu.Lock()
	defer n.mu.Unlock()
	return n.inc
}

// send publishes this node's live verdicts and pushes them to peers at once.
func (n *Node) send() {
	inc := n.current()
	if inc == nil {
		return
	}
	inc.cl.Gossip.SetState(verdictKey, n.board.localSet(time.Now()))
	inc.cl.Gossip.SendState()
}

// forgetGossip drops the last-gossip times of members gone for longer than a verdict lives
// (every rejoin elsewhere leaves an identity behind).
func (n *Node) forgetGossip() {
	n.mu.Lock()
	defer n.mu.Unlock()
	live := map[string]bool{}
	for _, m := range n.members {
		live[systemID(m)] = true
	}
	for id, at := range n.lastGossip {
		if !live[id] && time.Since(at) > n.cfg.VerdictTTLS.Duration() {
			delete(n.lastGossip, id)
		}
	}
}

// Fenced reports whether this node is just back from a stall: failures its legs saw during
// the stall are the stall's, not the engines'.
func (n *Node) Fenced() bool {
	if n == nil {
		return false
	}
	if n.stallUnseen() {
		return true // resumed, and a leg's timeout ran before the watchdog
	}
	n.mu.Lock()
	defer n.mu.Unlock()
	return time.Now().Before(n.fencedUntil)
}

// stallUnseen reports whether the watchdog's last tick is older than suspect_after_s: this
// process has just resumed from a stall that the watchdog has not run to notice yet. (Before
// its first tick, nothing is known.)
func (n *Node) stallUnseen() bool {
	t := n.tick.Load()
	return t != 0 && time.Since(n.epoch)-time.Duration(t) > n.cfg.SuspectAfterS.Duration()
}

// ShouldProbe reports whether this node is the one that probes engine this interval: the
// member the engine's name hashes to (rendezvous hashing over the live members), or any node
// when no live verdict from another node says the engine is out (its ejection is local news).
func (n *Node) ShouldProbe(engine string) bool {
	if n == nil {
		return true
	}
	w, ok := n.board.winner(engine, time.Now())
	if !ok || w.State == StateAdmitted {
		return true
	}
	return n.prober(engine) == n.advertise
}

func (n *Node) memberID() string {
	if inc := n.current(); inc != nil {
		return inc.system.ID
	}
	return ""
}

// prober is the address of the member that probes engine: the highest hash of (member address,
// engine). Addresses, not member ids, so that a rejoin does not move every engine's prober.
func (n *Node) prober(engine string) string {
	n.mu.Lock()
	members := n.members
	n.mu.Unlock()
	best, bestH := n.advertise, uint64(0)
	for _, m := range members {
		h := fnv.New64a()
		h.Write([]byte(m.Address()))
		h.Write([]byte{0})
		h.Write([]byte(engine))
		if s := h.Sum64(); s > bestH || (s == bestH && m.Address() > best) {
			best, bestH = m.Address(), s
		}
	}
	return best
}

// systemID is the actor-system id of a member: gossip names members by it, while providers may
// decorate it (etcd's member ids are "cluster@id").
func systemID(m *cluster.Member) string {
	if i := strings.LastIndexByte(m.Id, '@'); i >= 0 {
		return m.Id[i+1:]
	}
	return m.Id
}

// Verdict is the current winning verdict on engine, if a live one exists.
func (n *Node) Verdict(engine string) (Verdict, bool) {
	if n == nil {
		return Verdict{}, false
	}
	return n.board.winner(engine, time.Now())
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
