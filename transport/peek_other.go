//go:build !linux

package transport

import "net"

// peerClosed cannot peek at a socket on this OS: a pooled connection the engine closed is found
// when the request fails on it.
func peerClosed(net.Conn) bool { return false }
