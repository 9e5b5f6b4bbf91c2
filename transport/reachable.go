package transport

import (
	"context"
	"net"
	"net/url"
	"time"
)

// Reachable reports whether something accepts a TCP connection at the engine's host and port
// (the scheme's default when its URL names none) within timeout: the cheapest way to tell an
// engine that is gone from one that is slow, before work is spent on its behalf elsewhere.
func (c *EngineClient) Reachable(ctx context.Context, timeout time.Duration) error {
	u, err := url.Parse(c.BaseURL())
	if err != nil {
		return err
	}
	port := u.Port()
	if port == "" {
		port = "80"
		if u.Scheme == "https" {
			port = "443"
		}
	}
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	conn, err := (&net.Dialer{}).DialContext(ctx, "tcp", net.JoinHostPort(u.Hostname(), port))
	if err != nil {
		return err
	}
	return conn.Close()
}
