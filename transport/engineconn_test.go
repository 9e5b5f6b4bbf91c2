package transport

import (
	"context"
	"fmt"
	"net"
	"net/http"
	"runtime"
	"sync/atomic"
	"testing"
	"time"

	"github.com/valyala/fasthttp"

	"github.com/narwhal-router/narwhal/internal/testwait"
)

// testEngine serves POST / with handle, counting the requests that reached it and the
// connections it closed.
func testEngine(t *testing.T, idle time.Duration, handle func(n int64, w http.ResponseWriter)) (hc *fasthttp.HostClient, requests, closed *atomic.Int64) {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	var n, c atomic.Int64
	srv := &http.Server{IdleTimeout: idle, Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		handle(n.Add(1), w)
	}), ConnState: func(_ net.Conn, s http.ConnState) {
		if s == http.StateClosed {
			c.Add(1)
		}
	}}
	go srv.Serve(ln)
	hc = &fasthttp.HostClient{Addr: ln.Addr().String()}
	t.Cleanup(func() {
		hc.CloseIdleConnections()
		srv.Close()
	})
	return hc, &n, &c
}

func sendLeg(hc *fasthttp.HostClient) (int, error) {
	req := fasthttp.AcquireRequest()
	defer fasthttp.ReleaseRequest(req)
	req.Header.SetMethod(fasthttp.MethodPost)
	req.SetRequestURI("http://" + hc.Addr + "/")
	req.SetBodyString(`{}`)
	resp := fasthttp.AcquireResponse()
	defer fasthttp.ReleaseResponse(resp)
	lc, err := openLeg(context.Background(), hc, req, nil, resp, time.Now().Add(5*time.Second), time.Second, false, 1<<20)
	if err != nil {
		return 0, err
	}
	defer lc.close()
	return resp.StatusCode(), nil
}

// A pooled connection that the engine closed while it sat idle is noticed before the request
// goes out on it: the request is sent once, on a fresh connection, and succeeds.
func TestIdleConnectionClosedByTheEngineIsNotAFailure(t *testing.T) {
	if runtime.GOOS != "linux" {
		t.Skip("needs a socket peek")
	}
	defer func(d time.Duration) { staleAfter = d }(staleAfter)
	staleAfter = 50 * time.Millisecond // the test engine closes idle connections after 30 ms
	hc, n, closed := testEngine(t, 30*time.Millisecond, func(int64, http.ResponseWriter) {})
	for i := 0; i < 3; i++ {
		if status, err := sendLeg(hc); err != nil || status != 200 {
			t.Fatalf("leg %d: %d %v", i, status, err)
		}
		// sendLeg returned the connection to the pool before it returned: its idle time counts
		// from no earlier than now.
		released := time.Now()
		// The engine closes the idle connection, and it sits in the pool past staleAfter: the
		// next leg's check for a close is due.
		testwait.Until(t, 5*time.Second, func() bool {
			return closed.Load() == int64(i+1) && time.Since(released) > staleAfter+10*time.Millisecond
		},
			func() string {
				return fmt.Sprintf("the engine closed %d idle connections, want %d", closed.Load(), i+1)
			})
	}
	if got := n.Load(); got != 3 {
		t.Fatalf("the engine saw %d requests, want 3", got)
	}
}

// An engine that reads a request and closes the connection without answering may have started
// on it: the leg fails, and the request is not sent again behind the supervisor's back.
func TestRequestTheEngineDroppedIsNotResent(t *testing.T) {
	hc, n, _ := testEngine(t, 0, func(n int64, w http.ResponseWriter) {
		if n > 1 {
			panic(http.ErrAbortHandler) // close without a response
		}
	})
	if status, err := sendLeg(hc); err != nil || status != 200 {
		t.Fatalf("first leg: %d %v", status, err)
	}
	if _, err := sendLeg(hc); err == nil { // on the pooled connection
		t.Fatal("a dropped request succeeded")
	}
	if got := n.Load(); got != 2 {
		t.Fatalf("the engine saw %d requests, want 2 (no silent resend)", got)
	}
}

func TestPeerClosed(t *testing.T) {
	if runtime.GOOS != "linux" {
		t.Skip("needs a socket peek")
	}
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
	if peerClosed(c) {
		t.Fatal("an open idle connection looks closed")
	}
	s.Close()
	testwait.UntilEvery(t, time.Second, time.Millisecond, func() bool { return peerClosed(c) },
		func() string { return "a connection the peer closed looks open" })
}
