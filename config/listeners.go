package config

import (
	"net"
	"net/netip"
	"strconv"
	"strings"
)

// Listener is one address the router listens on, under the key that sets it.
type Listener struct {
	Key  string // the configuration key, e.g. server.admin_listen
	Addr string // host:port as written
	// UDP is set for an address that is also bound over UDP (the static cluster provider's
	// heartbeats share cluster.bind's port); every listener is bound over TCP.
	UDP bool
}

// Listeners lists every address a running router listens on: the client listener, the admin
// listener when there is one, and the cluster port when the cluster is on. `serve --check`
// binds each of them to prove it can; validation refuses two that would collide.
func (c Config) Listeners() []Listener {
	return listeners(c.Server.Listen, c.Server.AdminListen, c.Cluster.Enabled, c.Cluster.Bind, c.Cluster.Provider)
}

func listeners(listen, adminListen string, clusterOn bool, clusterBind, provider string) []Listener {
	out := []Listener{{Key: "server.listen", Addr: listen}}
	if adminListen != "" {
		out = append(out, Listener{Key: "server.admin_listen", Addr: adminListen})
	}
	if clusterOn {
		out = append(out, Listener{Key: "cluster.bind", Addr: clusterBind, UDP: provider == ProviderStatic})
	}
	return out
}

// checkListeners refuses two listeners on the same port whose hosts overlap: `serve` would
// open the first and fail on the second with "address already in use". Hosts overlap when they
// are the same, or when either is empty or unspecified (":8000", "0.0.0.0:8000" and
// "[::]:8000" take the port on every address, so they collide with "127.0.0.1:8000"). Port 0
// (any free port) never collides. Host names other than localhost are compared as written:
// telling whether two names resolve to the same address needs a lookup, and validation does
// no I/O — `serve --check` binds every listener and catches what is left.
func (c *Config) checkListeners(ck *checker) {
	ls := listeners(c.Server.Listen, c.Server.AdminListen, c.Cluster.Enabled, c.Cluster.Bind, c.Cluster.Provider)
	for i := 1; i < len(ls); i++ {
		for j := 0; j < i; j++ {
			if listenersCollide(ls[i].Addr, ls[j].Addr) {
				where := ", its default" // the other key is not in the file
				if line, ok := ck.lines[ls[j].Key]; ok {
					where = ", line " + strconv.Itoa(line)
				}
				ck.fail(ls[i].Key, "%q takes the port of %s (%q%s); give each listener a port of its own",
					ls[i].Addr, ls[j].Key, ls[j].Addr, where)
				break
			}
		}
	}
}

// listenersCollide reports whether listening on both a and b must fail.
func listenersCollide(a, b string) bool {
	ha, pa, errA := net.SplitHostPort(a)
	hb, pb, errB := net.SplitHostPort(b)
	if errA != nil || errB != nil || pa != pb || pa == "0" {
		return false // a malformed address is reported on its own
	}
	ipsA, wildA := listenHost(ha)
	ipsB, wildB := listenHost(hb)
	if wildA || wildB {
		return true
	}
	if ipsA == nil || ipsB == nil {
		return strings.EqualFold(ha, hb)
	}
	for _, x := range ipsA {
		for _, y := range ipsB {
			if x == y {
				return true
			}
		}
	}
	return false
}

// listenHost reads a listener's host: whether it takes every address (empty or unspecified),
// else the addresses it names (nil for a host name other than localhost). IPv4-mapped IPv6
// addresses are unmapped, so "[::ffff:127.0.0.1]" and "127.0.0.1" are the same host.
func listenHost(h string) (ips []netip.Addr, wildcard bool) {
	if h == "" {
		return nil, true
	}
	if strings.EqualFold(h, "localhost") {
		return []netip.Addr{netip.MustParseAddr("127.0.0.1"), netip.IPv6Loopback()}, false
	}
	ip, err := netip.ParseAddr(h)
	if err != nil {
		return nil, false
	}
	if ip.IsUnspecified() {
		return nil, true
	}
	return []netip.Addr{ip.Unmap().WithZone("")}, false
}
