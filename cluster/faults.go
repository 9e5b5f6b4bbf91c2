//go:build clusterfaults

package cluster

import (
	"context"
	"errors"
	"net"
	"os"
	"sync"
	"sync/atomic"
	"time"

	"google.golang.org/grpc/credentials"
)

// FaultHookCompiled says this build has the partition hook (FaultFileEnv): only builds with
// the clusterfaults tag, which the tests set, have it.
const FaultHookCompiled = true

// errPartitioned is what a cut connection reports.
var errPartitioned = errors.New("cluster network cut (test fault hook " + FaultFileEnv + ")")

// faults is the partition hook of one node; nil when the hook is not enabled.
type faults struct {
	cut   atomic.Bool
	mu    sync.Mutex
	conns map[*faultConn]struct{}
	done  chan struct{}
}

// startFaults enables the hook if FaultFileEnv is set: it watches the file every 20 ms.
func startFaults() *faults {
	path := os.Getenv(FaultFileEnv)
	if path == "" {
		return nil
	}
	f := &faults{conns: map[*faultConn]struct{}{}, done: make(chan struct{})}
	go func() {
		t := time.NewTicker(20 * time.Millisecond)
		defer t.Stop()
		for {
			_, err := os.Stat(path)
			f.set(err == nil)
			select {
			case <-f.done:
				return
			case <-t.C:
			}
		}
	}()
	return f
}

func (f *faults) stop() {
	if f != nil {
		close(f.done)
	}
}

// partitioned reports whether the network is cut now.
func (f *faults) partitioned() bool { return f != nil && f.cut.Load() }

// set cuts or heals the network; cutting closes every open cluster connection.
func (f *faults) set(cut bool) {
	if f.cut.Swap(cut) == cut || !cut {
		return
	}
	f.mu.Lock()
	conns := make([]*faultConn, 0, len(f.conns))
	for c := range f.conns {
		conns = append(conns, c)
	}
	f.mu.Unlock()
	for _, c := range conns {
		c.Close()
	}
}

// wrap tracks a connection so that a cut closes it; a connection made while cut is refused.
func (f *faults) wrap(c net.Conn) (net.Conn, error) {
	if f.partitioned() {
		c.Close()
		return nil, errPartitioned
	}
	fc := &faultConn{Conn: c, f: f}
	f.mu.Lock()
	f.conns[fc] = struct{}{}
	f.mu.Unlock()
	return fc, nil
}

type faultConn struct {
	net.Conn
	f    *faults
	once sync.Once
}

func (c *faultConn) Read(b []byte) (int, error) {
	if c.f.partitioned() {
		c.Close()
		return 0, errPartitioned
	}
	return c.Conn.Read(b)
}

func (c *faultConn) Write(b []byte) (int, error) {
	if c.f.partitioned() {
		c.Close()
		return 0, errPartitioned
	}
	return c.Conn.Write(b)
}

func (c *faultConn) Close() error {
	c.once.Do(func() {
		c.f.mu.Lock()
		delete(c.f.conns, c)
		c.f.mu.Unlock()
	})
	return c.Conn.Close()
}

// serverCreds wraps the credentials of protoactor's gRPC server so that a cut closes its
// connections too.
func (f *faults) serverCreds(c credentials.TransportCredentials) credentials.TransportCredentials {
	if f == nil {
		return c
	}
	return faultCreds{c, f}
}

// dialer is protoactor's dialer for peers, with the hook's wrapping when it is enabled.
func (f *faults) dialer(dial func(context.Context, string) (net.Conn, error)) func(context.Context, string) (net.Conn, error) {
	if f == nil {
		return dial
	}
	return func(ctx context.Context, addr string) (net.Conn, error) {
		if f.partitioned() {
			return nil, errPartitioned
		}
		c, err := dial(ctx, addr)
		if err != nil {
			return nil, err
		}
		return f.wrap(c)
	}
}

// faultCreds wraps each accepted connection of protoactor's gRPC server, after its own
// handshake, so that a cut closes it too.
type faultCreds struct {
	credentials.TransportCredentials
	f *faults
}

func (s faultCreds) ServerHandshake(c net.Conn) (net.Conn, credentials.AuthInfo, error) {
	c, info, err := s.TransportCredentials.ServerHandshake(c)
	if err != nil {
		return nil, nil, err
	}
	fc, err := s.f.wrap(c)
	if err != nil {
		return nil, nil, err
	}
	return fc, info, nil
}

func (s faultCreds) Clone() credentials.TransportCredentials {
	return faultCreds{s.TransportCredentials.Clone(), s.f}
}
