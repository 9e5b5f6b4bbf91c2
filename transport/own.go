package transport

import (
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/netip"
	"os"
	"slices"
	"strconv"
	"strings"
	"sync"

	"github.com/narwhal-router/narwhal/transport/kv"
)

// HopHeader marks every request the router sends to an engine. No engine sends it on, so a
// request that reaches a Narwhal listener carrying it has come round through something that
// forwards the router's own requests back to a router (an engine URL naming a router under
// another name, a proxy in front of one): the listener refuses it (transport/ingress/hop.go)
// rather than route it again, which would recurse until descriptors or memory ran out.
const HopHeader = "X-Narwhal-Hop"

// ownListeners are the ports of the router's own listeners, shared by every copy of the
// Provisioner that recorded them: the configured ones, then those bound at start (a listener
// configured on port 0 gets its port only then).
type ownListeners struct {
	mu    sync.RWMutex
	ports []int
}

func (o *ownListeners) has(port int) bool {
	o.mu.RLock()
	defer o.mu.RUnlock()
	return slices.Contains(o.ports, port)
}

func (o *ownListeners) add(ports ...int) {
	o.mu.Lock()
	defer o.mu.Unlock()
	for _, p := range ports {
		if p > 0 && !slices.Contains(o.ports, p) {
			o.ports = append(o.ports, p)
		}
	}
}

func (o *ownListeners) list() []int {
	o.mu.RLock()
	defer o.mu.RUnlock()
	return slices.Clone(o.ports)
}

// Listening records the addresses the router's listeners are bound to. Every copy of p — the
// discovery catalog's, the admin API's — refuses engines naming them from then on. Call it
// before any source can report an engine.
func (p Provisioner) Listening(addrs ...net.Addr) {
	if p.own == nil {
		return
	}
	for _, a := range addrs {
		if ta, ok := a.(*net.TCPAddr); ok {
			p.own.add(ta.Port)
		} else if _, port, err := net.SplitHostPort(a.String()); err == nil {
			n, _ := strconv.Atoi(port)
			p.own.add(n)
		}
	}
}

// ResolveNames has every copy of p look the host names engines are given by up with r (nil:
// never), so that a name resolving to this host at one of the router's listener ports is
// refused like the address itself; failures to resolve are written to log (nil: nowhere), which
// should be throttled. Call it before any source can report an engine.
func (p Provisioner) ResolveNames(r Resolver, log *slog.Logger) {
	if p.names != nil {
		p.names.use(r, log)
	}
}

// ownListener reports whether host:port is one of the router's own listeners: a port the router
// listens on, at an address of this host. Every host that reaches this machine counts —
// loopback, an unspecified address, localhost, this host's name, any address of its interfaces,
// a name that resolves to one of these — because a listener bound to every address answers on
// each. A name is looked up only at a listener's port, within hostNames' bounds; one that does
// not resolve in time is not refused (the hop marker ends the loop it may make).
func (p Provisioner) ownListener(host string, port int) bool {
	if p.own == nil || !p.own.has(port) {
		return false
	}
	if localHost(host) {
		return true
	}
	name := strings.Trim(host, "[]")
	if _, err := netip.ParseAddr(name); err == nil || p.names == nil {
		return false
	}
	addrs, _ := p.names.addrs(name)
	for _, a := range addrs {
		if localAddr(a) {
			return true
		}
	}
	return false
}

// localHost reports whether host (a literal address or a name) names this machine, without a
// lookup.
func localHost(host string) bool {
	h := strings.ToLower(strings.TrimSuffix(strings.Trim(host, "[]"), "."))
	if h == "localhost" || strings.HasSuffix(h, ".localhost") {
		return true
	}
	if name, err := os.Hostname(); err == nil && strings.EqualFold(h, strings.TrimSuffix(name, ".")) {
		return true
	}
	ip, err := netip.ParseAddr(h)
	return err == nil && localAddr(ip)
}

// localAddr reports whether ip is an address of this machine: loopback, unspecified, or one of
// its interfaces'.
func localAddr(ip netip.Addr) bool {
	ip = ip.Unmap().WithZone("")
	if ip.IsLoopback() || ip.IsUnspecified() {
		return true
	}
	addrs, err := net.InterfaceAddrs()
	if err != nil {
		return false
	}
	for _, a := range addrs {
		if n, ok := a.(*net.IPNet); ok {
			if x, ok := netip.AddrFromSlice(n.IP); ok && x.Unmap() == ip {
				return true
			}
		}
	}
	return false
}

// checkOwn refuses what would send the router's traffic back to itself: an engine URL, a KV
// pin or a KV event endpoint at one of its listeners, or kv.allowed_ports covering one of their
// ports. It holds the pin to the endpoint policy by the trust of its source (kv.CheckPin:
// operator for an engine the operator wrote).
func (p Provisioner) checkOwn(operator bool, spec EngineSpec) error {
	var errs []error
	if host, port, ok := splitPort(spec.Addr); ok && p.ownListener(host, port) {
		errs = append(errs, fmt.Errorf("url: names this router's own listener (port %d on this host): "+
			"the router would route requests to itself", port))
	}
	if spec.KV.Endpoint != "" {
		if host, port, ok := splitPort(spec.KV.Endpoint); ok && p.ownListener(host, port) {
			errs = append(errs, fmt.Errorf("kv.endpoint: %s is this router's own listener", spec.KV.Endpoint))
		} else if err := kv.CheckPin(spec.KV, operator); err != nil {
			errs = append(errs, err)
		}
	}
	for _, r := range spec.KV.AllowedPorts {
		for _, port := range p.ownPorts() {
			if r.Lo <= port && port <= r.Hi {
				errs = append(errs, fmt.Errorf("kv.allowed_ports: %s includes %d, the port of one of this router's listeners: "+
					"a descriptor must never send a consumer there", kv.FormatPorts([]kv.PortRange{r}), port))
			}
		}
	}
	for i, ep := range [...]string{spec.KVEvents.Endpoint, spec.KVEvents.ReplayEndpoint} {
		if rest, ok := strings.CutPrefix(ep, "tcp://"); ok {
			if host, port, ok := splitPort(rest); ok && p.ownListener(host, port) {
				errs = append(errs, fmt.Errorf("%s: %s is this router's own listener", [...]string{"kv_events.endpoint", "kv_events.replay_endpoint"}[i], ep))
			}
		}
	}
	return errors.Join(errs...)
}

func (p Provisioner) ownPorts() []int {
	if p.own == nil {
		return nil
	}
	return p.own.list()
}

// splitPort splits host:port with a numeric port.
func splitPort(hostport string) (string, int, bool) {
	host, port, err := net.SplitHostPort(hostport)
	if err != nil {
		return "", 0, false
	}
	n, err := strconv.Atoi(port)
	return host, n, err == nil
}
