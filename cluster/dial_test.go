package cluster

import (
	"context"
	"io"
	"net"
	"testing"
	"time"
)

// A peer's port that resets connections before its server speaks (the old incarnation's
// listener closing under a connection in its backlog) is dialled again, and the connection
// handed over is the one whose server spoke, with its first bytes intact.
func TestDialPeerRetriesAConnectionResetBeforeTheServerSpoke(t *testing.T) {
	ln, err := net.Listen("tcp", freeAddr(t))
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	accepted := make(chan int, 1)
	go func() {
		n := 0
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			n++
			if n <= 3 {
				if tc, ok := c.(*net.TCPConn); ok {
					tc.SetLinger(0) // a reset, as a closing listener's backlog gets
				}
				c.Close()
				continue
			}
			c.Write([]byte("settings"))
			accepted <- n
			io.Copy(io.Discard, c)
			return
		}
	}()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	c, err := dialPeer(ctx, ln.Addr().String(), nil)
	if err != nil {
		t.Fatalf("dialPeer: %v", err)
	}
	defer c.Close()
	if n := <-accepted; n != 4 {
		t.Fatalf("handed over connection %d, want the 4th (the first that the server spoke on)", n)
	}
	buf := make([]byte, 16)
	n, err := io.ReadAtLeast(c, buf, len("settings"))
	if err != nil || string(buf[:n]) != "settings" {
		t.Fatalf("first bytes read %q, %v; want the server's own %q", buf[:n], err, "settings")
	}
}

// A port nobody listens on fails once the caller's deadline passes, not later.
func TestDialPeerGivesUpAtTheCallersDeadline(t *testing.T) {
	addr := freeAddr(t)
	ctx, cancel := context.WithTimeout(context.Background(), 200*time.Millisecond)
	defer cancel()
	start := time.Now()
	if c, err := dialPeer(ctx, addr, nil); err == nil {
		c.Close()
		t.Fatal("dialPeer connected to a port nobody listens on")
	}
	if took := time.Since(start); took > peerRedialWait {
		t.Fatalf("gave up after %s, want at the caller's 200ms deadline", took)
	}
}
