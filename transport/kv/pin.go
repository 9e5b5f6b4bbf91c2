package kv

import (
	"fmt"
	"net"
	"strconv"
)

// CheckPin holds a pinned KV endpoint (engines[].kv.endpoint, host:port) to the endpoint policy
// before the engine is provisioned. Every pin must name a routable host: never a link-local,
// metadata, unspecified or multicast address. A pin the operator wrote (the configuration file,
// the token-guarded admin API: operator is true) is otherwise the operator's word. A pin a
// discovery registrant wrote (an etcd value, a pod annotation) is held to everything an
// unpinned producer's descriptor is held to — its own host or an allowed_endpoints entry, on
// kv.allowed_ports, never a port of the router's own listeners — so that write access to the
// registry is no way around the policy. s is the engine's side with its pin.
func CheckPin(s Side, operator bool) error {
	host, port, err := net.SplitHostPort(s.Endpoint)
	n, perr := strconv.ParseInt(port, 10, 64)
	if err != nil || perr != nil || n < 1 || n > 65535 {
		return fmt.Errorf("kv.endpoint: %q is not host:port", s.Endpoint)
	}
	ip, isIP := parseHost(host)
	if !isIP && !validHostName(host) {
		return fmt.Errorf("kv.endpoint: %q does not name a host name or IP address", s.Endpoint)
	}
	if forbidden(host, ip, isIP) {
		return fmt.Errorf("kv.endpoint: %s is a link-local, metadata or unroutable address; no producer's KV side channel listens there", s.Endpoint)
	}
	if operator {
		return nil
	}
	unpinned := s
	unpinned.Endpoint = ""
	if r := checkEndpoint(host, n, unpinned); r != nil {
		return fmt.Errorf("kv.endpoint: a registrant's pin is held to the policy of an unpinned descriptor: %s", r.Detail)
	}
	return nil
}
