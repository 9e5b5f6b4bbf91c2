package config

import (
	"fmt"
	"net"
	"slices"
	"strconv"
	"strings"
)

// PortRange is an inclusive range of ports, one entry of engines[].kv.allowed_ports.
type PortRange struct{ Lo, Hi int }

// String writes the range as kv.allowed_ports does: "5600-5663", or "7000" for one port.
func (r PortRange) String() string {
	if r.Lo == r.Hi {
		return strconv.Itoa(r.Lo)
	}
	return strconv.Itoa(r.Lo) + "-" + strconv.Itoa(r.Hi)
}

// ParsePorts reads engines[].kv.allowed_ports: entries "5600" or "5600-5663". The error names
// the first bad entry by its index, as "[i] ..." (the caller puts the key before it).
func ParsePorts(entries []string) ([]PortRange, error) {
	var out []PortRange
	for i, e := range entries {
		lo, hi, isRange := strings.Cut(strings.TrimSpace(e), "-")
		if !isRange {
			hi = lo
		}
		l, err1 := strconv.Atoi(strings.TrimSpace(lo))
		h, err2 := strconv.Atoi(strings.TrimSpace(hi))
		if err1 != nil || err2 != nil || l < 1 || h > 65535 || l > h {
			return nil, fmt.Errorf("[%d] %q is not allowed; want a port (5600) or a range of ports from 1 to 65535 (5600-5663)", i, e)
		}
		out = append(out, PortRange{Lo: l, Hi: h})
	}
	return out, nil
}

// routerPorts are the ports of the router's own listeners: a producer's descriptor may never
// send a consumer to them unless the operator pins the endpoint (transport/kv/endpoint.go).
func (c *Config) routerPorts() map[int]string {
	out := map[int]string{}
	add := func(key, addr string) {
		if _, p, err := net.SplitHostPort(addr); err == nil {
			if n, err := strconv.Atoi(p); err == nil && n > 0 {
				out[n] = key
			}
		}
	}
	add("server.listen", c.Server.Listen)
	if c.Server.AdminListen != "" {
		add("server.admin_listen", c.Server.AdminListen)
	}
	if c.Cluster.Enabled {
		add("cluster.bind", c.Cluster.Bind)
	}
	return out
}

// checkAllowedPorts records engines[i].kv.allowed_ports problems: malformed entries, and a range
// that would let a descriptor name one of the router's own listeners.
func (ck *checker) checkAllowedPorts(c *Config, i int, e Engine) {
	path := fmt.Sprintf("engines[%d].kv.allowed_ports", i)
	ranges, err := ParsePorts(e.KV.AllowedPorts)
	if err != nil {
		ck.fail(path, "%v", err)
		return
	}
	for port, key := range c.routerPorts() {
		for _, r := range ranges {
			if r.Lo <= port && port <= r.Hi {
				ck.fail(path, "%s includes %d, the port of %s: a descriptor must never send a consumer to the router's own listener", r, port, key)
			}
		}
	}
}

// ReservedPorts are the ports of the router's own listeners (server.listen, server.admin_listen,
// cluster.bind when the cluster is on): no producer's descriptor may name them, whatever its
// engine's kv.allowed_ports say (transport/kv's Side.ReservedPorts).
func (c *Config) ReservedPorts() []int {
	var out []int
	for p := range c.routerPorts() {
		out = append(out, p)
	}
	slices.Sort(out) // the same file reserves the same list: specs compare equal across reloads
	return out
}
