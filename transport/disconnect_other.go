//go:build !linux

package transport

import "net"

// goneWatcher has no way to notice a silent hang-up on this OS: such a client is noticed at the
// first write after commit instead.
type goneWatcher struct{}

func newGoneWatcher() (*goneWatcher, error) { return &goneWatcher{}, nil }

func (*goneWatcher) watch(net.Conn, func()) func() { return func() {} }

func (*goneWatcher) close() {}

// peerClosed cannot peek at a socket on this OS: a pooled connection the engine closed is found
// when the request fails on it.
func peerClosed(net.Conn) bool { return false }
