//go:build !linux

package ingress

import "net"

// goneWatcher has no way to notice a silent hang-up on this OS: such a client is noticed at the
// first write after commit instead.
type goneWatcher struct{}

// goneWatch is one request's registration (none here).
type goneWatch struct{}

func (goneWatch) stop() {}

func newGoneWatcher(func(*Exchange)) (*goneWatcher, error) { return &goneWatcher{}, nil }

func (*goneWatcher) watch(net.Conn, *Exchange) goneWatch { return goneWatch{} }

func (*goneWatcher) close() {}
