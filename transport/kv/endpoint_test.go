package kv

import (
	"net"
	"strconv"
	"strings"
	"testing"

	"github.com/narwhal-router/narwhal/transport/wire"
)

// An unpinned producer may point consumers only at its own host, at what an allowlist names,
// and never at link-local or metadata addresses unless the operator named them (issue 12, item 3).
func TestKVEndpointPolicy(t *testing.T) {
	own := func(p *Pair) { p.Producer.Host = "10.0.0.5" }
	allow := func(list ...string) func(*Pair) { return func(p *Pair) { p.Producer.AllowedEndpoints = list } }
	pin := func(ep string) func(*Pair) { return func(p *Pair) { p.Producer.Endpoint = ep } }
	ports := func(r ...PortRange) func(*Pair) { return func(p *Pair) { p.Producer.AllowedPorts = r } }
	reserved := func(list ...int) func(*Pair) { return func(p *Pair) { p.Producer.ReservedPorts = list } }
	at := func(host, port string) string {
		return strings.Replace(with("remote_port", port), `"10.0.0.5"`, host, 1)
	}
	cases := []struct {
		name   string
		desc   string
		pair   Pair
		reject bool
	}{
		{"own host", goodDesc, pair(own), false},
		{"own host by name", at(`"engine-a.internal"`, "5600"), pair(func(p *Pair) { p.Producer.Host = "Engine-A.internal" }), false},
		{"another host", at(`"10.0.0.6"`, "5600"), pair(own), true},
		{"loopback from a remote producer", at(`"127.0.0.1"`, "8001"), pair(own), true},
		{"metadata", at(`"169.254.169.254"`, "80"), pair(own), true},
		{"metadata even on the producer's own link-local host", at(`"169.254.169.254"`, "80"),
			pair(func(p *Pair) { p.Producer.Host = "169.254.169.254" }), true},
		{"metadata by name", at(`"metadata.google.internal"`, "80"), pair(func(p *Pair) { p.Producer.Host = "metadata.google.internal" }), true},
		{"unspecified", at(`"0.0.0.0"`, "5600"), pair(func(p *Pair) { p.Producer.Host = "0.0.0.0" }), true},
		{"a host with a path", at(`"10.0.0.5/admin"`, "5600"), pair(own), true},
		{"a host with credentials", at(`"user@10.0.0.5"`, "5600"), pair(own), true},
		{"a host with a port", at(`"10.0.0.5:80"`, "5600"), pair(own), true},
		{"allowlist CIDR", at(`"10.1.2.3"`, "5600"), pair(own, allow("10.1.0.0/16")), false},
		{"allowlist CIDR miss", at(`"10.2.0.1"`, "5600"), pair(own, allow("10.1.0.0/16")), true},
		{"allowlist replaces the same-host rule", goodDesc, pair(own, allow("10.1.0.0/16")), true},
		{"allowlist host:port", at(`"kv-gw.internal"`, "5600"), pair(own, allow("kv-gw.internal:5600")), false},
		{"allowlist host:port, other port", at(`"kv-gw.internal"`, "5601"), pair(own, allow("kv-gw.internal:5600")), true},
		{"link-local allowed when named", at(`"169.254.10.1"`, "5600"), pair(own, allow("169.254.10.0/24")), false},
		{"pin wins", at(`"169.254.10.1"`, "5600"), pair(own, pin("169.254.10.1:5600")), false},
		{"pin mismatch", goodDesc, pair(own, pin("10.0.0.5:5601")), true},
		{"ipv6 own host", at(`"fd00::5"`, "5600"), pair(func(p *Pair) { p.Producer.Host = "fd00:0::5" }), false},
		{"ipv6 link-local", at(`"fe80::1"`, "5600"), pair(func(p *Pair) { p.Producer.Host = "fe80::1" }), true},
		// The port rule (issue 26, item 6): the own host and CIDR entries only on the allowed
		// ports (by default vLLM's NIXL range), never on the router's own listeners.
		{"own host, the last default port", at(`"10.0.0.5"`, "5663"), pair(own), false},
		{"own host, another service's port", at(`"10.0.0.5"`, "6379"), pair(own), true},
		{"own host, the admin port", at(`"10.0.0.5"`, "8001"), pair(own), true},
		{"own host, a port allowed by configuration", at(`"10.0.0.5"`, "7001"), pair(own, ports(PortRange{7000, 7010})), false},
		{"own host, the default range once others are configured", goodDesc, pair(own, ports(PortRange{7000, 7010})), true},
		{"own host, a reserved port inside the allowed range", at(`"10.0.0.5"`, "7001"), pair(own, ports(PortRange{7000, 7010}), reserved(7001)), true},
		{"allowlist CIDR, another service's port", at(`"10.1.2.3"`, "22"), pair(own, allow("10.1.0.0/16")), true},
		{"allowlist CIDR, a reserved port", at(`"10.1.2.3"`, "5601"), pair(own, allow("10.1.0.0/16"), reserved(5601)), true},
		{"allowlist host:port names any port", at(`"kv-gw.internal"`, "6379"), pair(own, allow("kv-gw.internal:6379")), false},
		{"pin names any port", at(`"10.0.0.5"`, "8001"), pair(own, pin("10.0.0.5:8001"), reserved(8001)), false},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			rej := validate(t, []byte(tc.desc), wire.EndpointCompletions, tc.pair)
			if tc.reject != (rej != nil) {
				t.Fatalf("%s: rejection %v, want rejected=%v", tc.desc, rej, tc.reject)
			}
			if rej != nil && rej.Reason != ReasonEndpointMismatch {
				t.Fatalf("reason %q, want %q", rej.Reason, ReasonEndpointMismatch)
			}
		})
	}
}

// A member that would flip the consumer's side of the protocol is refused, not rewritten; the
// opaque members of an accepted descriptor stay byte for byte (TestDescriptorWithUnknownFields...).
func TestProtocolFlipsRejected(t *testing.T) {
	for _, v := range []string{"true", `"yes"`, "1"} {
		rej := validate(t, []byte(with("do_remote_decode", v)), wire.EndpointCompletions, pair())
		if rej == nil || rej.Reason != ReasonConnectorMismatch {
			t.Fatalf("do_remote_decode %s: %v", v, rej)
		}
	}
	for _, v := range []string{"false", "null", ""} {
		if rej := validate(t, []byte(with("do_remote_decode", v)), wire.EndpointCompletions, pair()); rej != nil {
			t.Fatalf("do_remote_decode %q rejected: %v", v, rej)
		}
	}
}

func TestAppendHostPortIsJoinHostPort(t *testing.T) {
	for _, h := range []string{"10.0.0.5", "::1", "[::1]", "fe80::1%eth0", "kv.example", ""} {
		for _, p := range []int64{1, 5600, 65535} {
			if got, want := string(appendHostPort(nil, h, p)), net.JoinHostPort(h, strconv.FormatInt(p, 10)); got != want {
				t.Errorf("%q %d: %q, want %q", h, p, got, want)
			}
		}
	}
}

// A descriptor past the 1 MiB bound has its own reason, not connector_mismatch (issue 26,
// item 7); one just within it is judged on its content.
func TestOversizeDescriptorHasItsOwnReason(t *testing.T) {
	pad := func(n int) []byte {
		d := []byte(goodDesc)
		filler := `,"x":"` + strings.Repeat("a", n-len(d)-len(`,"x":""`)) + `"`
		return append(d[:len(d)-1:len(d)-1], append([]byte(filler), '}')...)
	}
	if _, rej := ParseDescriptor(pad(maxDescriptorBytes+1), wire.EndpointCompletions); rej == nil || rej.Reason != ReasonDescriptorTooLarge {
		t.Fatalf("1 MiB + 1: %v, want %s", rej, ReasonDescriptorTooLarge)
	}
	d := pad(maxDescriptorBytes)
	if len(d) != maxDescriptorBytes {
		t.Fatalf("padding made %d bytes", len(d))
	}
	if _, rej := ParseDescriptor(d, wire.EndpointCompletions); rej != nil {
		t.Fatalf("exactly 1 MiB: %v", rej)
	}
}
