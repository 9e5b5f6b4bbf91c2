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

	mu      sync.Mutex
	next    uint64
	waiters map[uint64]func()
	done    chan struct{}
}

func newGoneWatcher() (*goneWatcher, error) {
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
	w := &goneWatcher{epfd: epfd, wakefd: wakefd, waiters: map[uint64]func(){}, next: 1, done: make(chan struct{})}
	go w.loop()
	return w, nil
}

// watch calls onGone once if the peer of c hangs up before the returned stop is called. stop
// only forgets the request: the socket stays registered (a keep-alive connection's next request
// re-arms it with EPOLL_CTL_MOD, and the kernel drops it from the set when it is closed), so a
// request costs one epoll_ctl, and a late event for a forgotten request finds nobody.
func (w *goneWatcher) watch(c net.Conn, onGone func()) (stop func()) {
	if tc, ok := c.(interface{ NetConn() net.Conn }); ok { // TLS: watch the TCP socket under it
		c = tc.NetConn()
	}
	sc, ok := c.(syscall.Conn)
	if !ok {
		return func() {}
	}
	raw, err := sc.SyscallConn()
	if err != nil {
		return func() {}
	}
	w.mu.Lock()
	token := w.next
	w.next++
	w.waiters[token] = onGone
	w.mu.Unlock()

	fd := -1
	ctlErr := raw.Control(func(s uintptr) {
		fd = int(s)
		ev := unix.EpollEvent{Events: unix.EPOLLRDHUP | unix.EPOLLONESHOT,
			Fd: int32(token), Pad: int32(token >> 32)}
		err = unix.EpollCtl(w.epfd, unix.EPOLL_CTL_MOD, fd, &ev)
		if errors.Is(err, unix.ENOENT) { // the connection's first watched request
			err = unix.EpollCtl(w.epfd, unix.EPOLL_CTL_ADD, fd, &ev)
		}
	})
	if ctlErr != nil || err != nil {
		w.forget(token)
		return func() {}
	}
	return func() { w.forget(token) }
}

func (w *goneWatcher) forget(token uint64) func() {
	w.mu.Lock()
	f := w.waiters[token]
	delete(w.waiters, token)
	w.mu.Unlock()
	return f
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
			if f := w.forget(token); f != nil {
				f()
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
