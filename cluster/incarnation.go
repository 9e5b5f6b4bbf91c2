package cluster

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"strconv"
	"sync/atomic"
	"time"

	"github.com/asynkron/protoactor-go/actor"
	"github.com/asynkron/protoactor-go/cluster"
	"github.com/asynkron/protoactor-go/cluster/identitylookup/disthash"
	"github.com/asynkron/protoactor-go/eventstream"
	"github.com/asynkron/protoactor-go/remote"
	"google.golang.org/grpc"

	"github.com/narwhal-router/narwhal/config"
)

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
