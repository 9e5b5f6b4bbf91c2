package node

import (
	"fmt"
	"net"

	"github.com/narwhal-router/narwhal/config"
)

// listen opens the client and admin listeners (or takes the ones opts gives), each wrapped so
// that running out of file descriptors pauses accepting instead of stopping it (accept.go).
func (s *Server) listen(cfg config.Config, opts Options) error {
	ln := opts.Listener
	if ln == nil {
		var err error
		if ln, err = net.Listen("tcp", cfg.Server.Listen); err != nil {
			return fmt.Errorf("listen %s: %w", cfg.Server.Listen, err)
		}
	}
	s.ln = s.patient(ln, "client")
	adminLn := opts.AdminListener
	if adminLn == nil && cfg.Server.AdminListen != "" {
		var err error
		if adminLn, err = net.Listen("tcp", cfg.Server.AdminListen); err != nil {
			s.ln.Close()
			return fmt.Errorf("listen %s (admin): %w", cfg.Server.AdminListen, err)
		}
	}
	if adminLn != nil {
		s.adminLn = s.patient(adminLn, "admin")
	}
	return nil
}

// closeListeners closes what listen opened (a start that fails after it).
func (s *Server) closeListeners() {
	s.ln.Close()
	if s.adminLn != nil {
		s.adminLn.Close()
	}
}

// listenerAddrs are the addresses the listeners are bound to.
func (s *Server) listenerAddrs() []net.Addr {
	out := []net.Addr{s.ln.Addr()}
	if s.adminLn != nil {
		out = append(out, s.adminLn.Addr())
	}
	return out
}
