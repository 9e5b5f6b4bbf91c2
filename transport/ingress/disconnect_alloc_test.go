//go:build linux

package ingress

import (
	"net"
	"testing"
	"time"
)

// Watching a request's client connection and forgetting it again, as every request does, costs
// one allocation (the socket's RawConn; it was 6 with closures): an allocation budget (issue
// #17). A hang-up while watched still reaches the callback with the request's exchange.
func TestGoneWatchAllocations(t *testing.T) {
	gone := make(chan *Exchange, 1)
	w, err := newGoneWatcher(func(x *Exchange) { gone <- x })
	if err != nil {
		t.Fatal(err)
	}
	defer w.close()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	c, err := net.Dial("tcp", ln.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	s, err := ln.Accept()
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	x := &Exchange{}
	n := testing.AllocsPerRun(200, func() {
		w.watch(s, x).stop()
	})
	t.Logf("%.1f allocations per watched request", n)
	if n > 1 && !raceEnabled { // under the race detector sync.Pool drops items at random
		t.Fatalf("%.1f allocations per watched request, want at most 1", n)
	}

	w.watch(s, x)
	c.Close()
	select {
	case got := <-gone:
		if got != x {
			t.Fatalf("onGone called with %p, want the watched exchange %p", got, x)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("the client hung up but onGone was not called within 10 s")
	}
}
