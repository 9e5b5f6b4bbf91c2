//go:build !linux

package ingress

import "net"

// goneWatcher has no way to notice a silent hang-up on this OS: such a client is noticed at the
// first write after commit instead.
type goneWatcher struct{}

func newGoneWatcher() (*goneWatcher, error) { return &goneWatcher{}, nil }

func (*goneWatcher) watch(net.Conn, func()) func() { return func() {} }

func (*goneWatcher) close() {}
