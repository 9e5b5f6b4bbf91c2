//go:build linux

package ingress

import (
	"errors"
	"fmt"
	"net"
	"sync"
	"syscall"

	"golang.org/x/sys/unix"
)

// goneWatcher notices clients that hang up while nothing is being written to them (queued,
// prefilling, waiting for the first token, or on a silent stream). One epoll instance watches
// every waiting request's socket for EPOLLRDHUP with EPOLLONESHOT; one goroutine waits on it and
// calls the request's callback. It never reads the socket nor touches its deadlines, so
// keep-alive, pipelining and TLS are unaffected.
type goneWatcher struct {
	epfd   int
	wakefd int
	onGone func(*Exchange)

	mu      sync.Mutex
	next    uint64
	waiters map[uint64]*Exchange
	done    chan struct{}
	// ctls are reusable epoll_ctl calls for RawConn.Control: a closure per request would
	// allocate it and the variables it captures.
	ctls sync.Pool
}

// goneWatch is one request's registration; stop forgets it. A value, not a closure, so that
// watching costs no allocation of its own.
type goneWatch struct {
	w     *goneWatcher
	token uint64
}

// stop forgets the request: a hang-up noticed after it calls nobody.
func (g goneWatch) stop() {
	if g.w != nil {
		g.w.forget(g.token)
	}
}

// ctlOp is one EPOLL_CTL_MOD (or ADD, for a connection's first watched request) of a socket.
type ctlOp struct {
	epfd  int
	token uint64
	err   error
	fn    func(fd uintptr) // op.do, bound once
}

func (op *ctlOp) do(s uintptr) {
	ev := unix.EpollEvent{Events: unix.EPOLLRDHUP | unix.EPOLLONESHOT, Fd: int32(op.token), Pad: int32(op.token >> 32)}
	op.err = unix.EpollCtl(op.epfd, unix.EPOLL_CTL_MOD, int(s), &ev)
	if errors.Is(op.err, unix.ENOENT) { // the connection's first watched request
		op.err = unix.EpollCtl(op.epfd, unix.EPOLL_CTL_ADD, int(s), &ev)
	}
}

// newGoneWatcher starts the watcher; onGone is called (on its goroutine) for a watched
// request whose client hung up.
func newGoneWatcher(onGone func(*Exchange)) (*goneWatcher, error) {
	epfd, err := unix.EpollCreate1(unix.EPOLL_CLOEXEC)
	if err != nil {
		return nil, fmt.Errorf("disconnect watcher: epoll_create1: %w", err)
	}
	wakefd, err := unix.Eventfd(0, unix.EFD_CLOEXEC|unix.EFD_NONBLOCK)
	if err != nil {
		unix.Close(epfd)
		return nil, fmt.Errorf("disconnect watcher: eventfd: %w", err)
	}
	ev := unix.EpollEvent{Events: unix.EPOLLIN}
	if err := unix.EpollCtl(epfd, unix.EPOLL_CTL_ADD, wakefd, &ev); err != nil {
		unix.Close(epfd)
		unix.Close(wakefd)
		return nil, fmt.Errorf("disconnect watcher: epoll_ctl: %w", err)
	}
	w := &goneWatcher{epfd: epfd, wakefd: wakefd, onGone: onGone, waiters: map[uint64]*Exchange{}, next: 1, done: make(chan struct{})}
	w.ctls.New = func() any {
		op := &ctlOp{epfd: epfd}
		op.fn = op.do
		return op
	}
	go w.loop()
	return w, nil
}

// watch calls the watcher's onGone with x once if the peer of c hangs up before the returned
// watch is stopped. stop only forgets the request: the socket stays registered (a keep-alive
// connection's next request re-arms it with EPOLL_CTL_MOD, and the kernel drops it from the set
// when it is closed), so a request costs one epoll_ctl, and a late event for a forgotten request
// finds nobody.
func (w *goneWatcher) watch(c net.Conn, x *Exchange) goneWatch {
	if tc, ok := c.(interface{ NetConn() net.Conn }); ok { // TLS: watch the TCP socket under it
		c = tc.NetConn()
	}
	sc, ok := c.(syscall.Conn)
	if !ok {
		return goneWatch{}
	}
	raw, err := sc.SyscallConn()
	if err != nil {
		return goneWatch{}
	}
	w.mu.Lock()
	token := w.next
	w.next++
	w.waiters[token] = x
	w.mu.Unlock()

	op := w.ctls.Get().(*ctlOp)
	op.token, op.err = token, nil
	ctlErr := raw.Control(op.fn)
	err = op.err
	op.err = nil
	w.ctls.Put(op)
	if ctlErr != nil || err != nil {
		w.forget(token)
		return goneWatch{}
	}
	return goneWatch{w: w, token: token}
}

func (w *goneWatcher) forget(token uint64) *Exchange {
	w.mu.Lock()
	x := w.waiters[token]
	delete(w.waiters, token)
	w.mu.Unlock()
	return x
}

func (w *goneWatcher) loop() {
	defer close(w.done)
	events := make([]unix.EpollEvent, 128)
	for {
		n, err := unix.EpollWait(w.epfd, events, -1)
		if err != nil {
			if errors.Is(err, unix.EINTR) {
				continue
			}
			return
		}
		for _, ev := range events[:n] {
			token := uint64(uint32(ev.Fd)) | uint64(uint32(ev.Pad))<<32
			if token == 0 { // the wake-up eventfd: close was called
				return
			}
			// A stale token (the request already stopped watching) finds nothing.
			if x := w.forget(token); x != nil {
				w.onGone(x)
			}
		}
	}
}

// close stops the watcher goroutine; pending waiters are never called.
func (w *goneWatcher) close() {
	var one = [8]byte{1}
	_, _ = unix.Write(w.wakefd, one[:])
	<-w.done
	unix.Close(w.epfd)
	unix.Close(w.wakefd)
}
