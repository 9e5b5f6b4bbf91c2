package main

import (
	"errors"
	"fmt"
	"io"
	"net"

	"github.com/narwhal-router/narwhal/config"
)

// bindListeners opens every listener the configuration names, all at once, and closes them
// again: what `serve --check` does so that a port another process holds, an address this host
// does not have or a privileged port is refused by the check rather than by `serve`. Holding
// them together also catches two keys whose host names resolve to one address, which
// validation (no I/O) cannot tell. Every failure is reported, each naming its key.
func bindListeners(ls []config.Listener) error {
	var open []io.Closer
	defer func() {
		for _, c := range open {
			c.Close()
		}
	}()
	var errs []error
	for _, l := range ls {
		ln, err := net.Listen("tcp", l.Addr)
		if err != nil {
			errs = append(errs, fmt.Errorf("%s: cannot listen on %q: %w", l.Key, l.Addr, bindCause(err)))
			continue
		}
		open = append(open, ln)
		if !l.UDP {
			continue
		}
		// The static cluster provider's heartbeats use the same port over UDP.
		pc, err := net.ListenPacket("udp", l.Addr)
		if err != nil {
			errs = append(errs, fmt.Errorf("%s: cannot listen on %q over UDP (the cluster's heartbeats): %w", l.Key, l.Addr, bindCause(err)))
			continue
		}
		open = append(open, pc)
	}
	return errors.Join(errs...)
}

// bindCause is the system's reason (address already in use, cannot assign requested address,
// permission denied) without the net package's repetition of the address.
func bindCause(err error) error {
	var op *net.OpError
	if errors.As(err, &op) && op.Err != nil {
		return op.Err
	}
	return err
}
