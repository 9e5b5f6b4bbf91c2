package cluster

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"io"
	"net"
	"syscall"
	"time"
)

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
