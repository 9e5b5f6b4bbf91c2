package kv

import (
	"net/netip"
	"slices"
	"strconv"
	"strings"
	"unsafe"
)

// The KV endpoint policy. A descriptor tells the consumer where to connect for the KV transfer,
// so an unconstrained producer (compromised or buggy) could point every consumer at any address:
// a cloud metadata service, the router's admin listener, another tenant. Where a consumer may be
// sent is therefore decided here, in this order:
//
//  1. a pinned endpoint (engines[].kv.endpoint): the descriptor must name exactly it;
//  2. an allowlist (engines[].kv.allowed_endpoints: CIDRs, exact host:port entries): the
//     descriptor's endpoint must match one entry; a CIDR entry admits its hosts on the allowed
//     ports only (below);
//  3. otherwise the KV host must be the producer's own host, as written in its url, on an
//     allowed port, and must not be a link-local, metadata, unspecified or multicast address.
//
// The allowed ports (engines[].kv.allowed_ports) default to the range vLLM's NIXL connector
// listens on, and never include a port of the router's own listeners: a producer on the
// router's host must not be able to send consumers to its admin listener, nor to any other
// local service, by naming its own host.
//
// Link-local and metadata addresses pass only when the operator named them (a pin, or an
// allowlist entry that covers them). The host must always be a bare host name or IP address.

// metadataNames and metadataAddrs are cloud instance-metadata services. Addresses are compared
// as addresses, so another spelling of one (fd00:ec2:0::254, ::ffff:100.100.100.200) is caught too.
var (
	metadataNames = []string{"metadata.google.internal", "metadata"}
	metadataAddrs = []netip.Addr{
		netip.MustParseAddr("169.254.169.254"),
		netip.MustParseAddr("fd00:ec2::254"),
		netip.MustParseAddr("100.100.100.200"),
	}
)

// checkEndpoint applies the policy to the host and port a descriptor names.
func checkEndpoint(host string, port int64, p Side) *Rejection {
	// host:port as net.JoinHostPort spells it, built on the stack: got is only compared, and the
	// rejections below copy it (string(gotB)), so nothing is allocated for a descriptor that passes.
	var buf [96]byte
	gotB := appendHostPort(buf[:0], host, port)
	got := unsafe.String(unsafe.SliceData(gotB), len(gotB))
	ip, isIP := parseHost(host)
	if !isIP && !validHostName(host) {
		return Reject(ReasonEndpointMismatch, "remote_host %s is not a host name or IP address", excerpt([]byte(host)))
	}
	if p.Endpoint != "" {
		if !strings.EqualFold(got, p.Endpoint) {
			return Reject(ReasonEndpointMismatch, "descriptor names KV endpoint %s but producer %s is pinned to %s",
				string(gotB), p.Engine, p.Endpoint)
		}
		return nil
	}
	if len(p.AllowedEndpoints) > 0 {
		for _, a := range p.AllowedEndpoints {
			if pre, err := netip.ParsePrefix(a); err == nil {
				if isIP && pre.Contains(ip) {
					return p.checkPort(gotB, port)
				}
			} else if strings.EqualFold(a, got) {
				return nil
			}
		}
		return Reject(ReasonEndpointMismatch, "descriptor names KV endpoint %s, which producer %s's allowed_endpoints do not include",
			string(gotB), p.Engine)
	}
	if forbidden(host, ip, isIP) {
		return Reject(ReasonEndpointMismatch, "descriptor names KV endpoint %s, a link-local, metadata or unroutable address (allow it with kv.endpoint or kv.allowed_endpoints)", string(gotB))
	}
	if p.Host == "" {
		return nil // the standalone Go API with no producer URL: nothing to compare with
	}
	pip, pIsIP := parseHost(p.Host)
	if strings.EqualFold(host, p.Host) || (isIP && pIsIP && ip == pip) {
		return p.checkPort(gotB, port)
	}
	return Reject(ReasonEndpointMismatch, "descriptor names KV host %s, not producer %s's own host %s (pin kv.endpoint or set kv.allowed_endpoints to allow others)",
		excerpt([]byte(host)), p.Engine, p.Host)
}

// PortRange is an inclusive range of ports.
type PortRange struct{ Lo, Hi int }

// DefaultAllowedPorts is where vLLM's NIXL connector listens for its side channel: from
// VLLM_NIXL_SIDE_CHANNEL_PORT (5600 unless set) up, one port per data-parallel rank (older
// releases: one per rank × tensor-parallel size, and one per tensor-parallel worker), so 64
// ports cover every deployment of up to 64 ranks. An engine that sets another base port
// configures engines[].kv.allowed_ports (or pins kv.endpoint).
var DefaultAllowedPorts = []PortRange{{Lo: 5600, Hi: 5663}}

// checkPort applies the port rule of the same-host and CIDR cases to the endpoint got.
func (p Side) checkPort(got []byte, port int64) *Rejection {
	if slices.Contains(p.ReservedPorts, int(port)) {
		return Reject(ReasonEndpointMismatch, "descriptor names KV endpoint %s, a port of the router's own listeners (pin kv.endpoint to allow a port)", string(got))
	}
	ranges := p.AllowedPorts
	if len(ranges) == 0 {
		ranges = defaultPorts(p.Connector) // mooncake.go: a Mooncake producer's bootstrap port
	}
	for _, r := range ranges {
		if int64(r.Lo) <= port && port <= int64(r.Hi) {
			return nil
		}
	}
	return Reject(ReasonEndpointMismatch, "descriptor names KV endpoint %s, on a port producer %s's kv.allowed_ports do not include (%s)",
		string(got), p.Engine, FormatPorts(ranges))
}

// FormatPorts writes ranges as kv.allowed_ports does: "5600-5663, 7000".
func FormatPorts(ranges []PortRange) string {
	var b strings.Builder
	for i, r := range ranges {
		if i > 0 {
			b.WriteString(", ")
		}
		b.WriteString(strconv.Itoa(r.Lo))
		if r.Hi != r.Lo {
			b.WriteString("-" + strconv.Itoa(r.Hi))
		}
	}
	return b.String()
}

// appendHostPort appends what net.JoinHostPort(host, port) returns.
func appendHostPort(b []byte, host string, port int64) []byte {
	if strings.IndexByte(host, ':') >= 0 {
		b = append(append(append(b, '['), host...), ']')
	} else {
		b = append(b, host...)
	}
	return strconv.AppendInt(append(b, ':'), port, 10)
}

func parseHost(h string) (netip.Addr, bool) {
	ip, err := netip.ParseAddr(strings.TrimSuffix(strings.TrimPrefix(h, "["), "]"))
	if err != nil || ip.Zone() != "" {
		return netip.Addr{}, false
	}
	return ip.Unmap(), true
}

// validHostName accepts DNS names: letters, digits, '-', '_' and dots, at most 253 bytes.
func validHostName(h string) bool {
	if h == "" || len(h) > 253 || h[0] == '.' || h[0] == '-' {
		return false
	}
	for i := 0; i < len(h); i++ {
		c := h[i]
		if !(c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || c == '-' || c == '.' || c == '_') {
			return false
		}
	}
	return true
}

func forbidden(host string, ip netip.Addr, isIP bool) bool {
	for _, m := range metadataNames {
		if strings.EqualFold(strings.TrimSuffix(host, "."), m) {
			return true
		}
	}
	if isIP && slices.Contains(metadataAddrs, ip) {
		return true
	}
	return isIP && (ip.IsLinkLocalUnicast() || ip.IsLinkLocalMulticast() || ip.IsUnspecified() || ip.IsMulticast())
}
