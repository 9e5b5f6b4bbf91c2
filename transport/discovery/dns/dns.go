// Package dns is the engine source of a DNS name re-resolved on an interval: the A or AAAA
// records of a headless Service (one address an engine, on the configured port), or the SRV
// records of a service catalogue such as Consul (each target's address and the record's port).
// It asks one server at a time (the configured one, else /etc/resolv.conf's in order) and
// tells the answers apart: a name with no records is an empty set, a SERVFAIL, a refusal or
// silence is an error and the last set stands.
package dns

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/netip"
	"strconv"
	"strings"
	"time"

	"github.com/miekg/dns"

	"github.com/narwhal-router/narwhal/config"
	"github.com/narwhal-router/narwhal/transport/discovery"
)

// resolvConf is where the system's DNS servers are read from when no resolver is configured.
const resolvConf = "/etc/resolv.conf"

// maxName is the longest engine name (config's name rule).
const maxName = 64

// Source resolves one name.
type Source struct {
	cfg config.DNSDiscovery
	// name is cfg.Name fully qualified (with its final dot); resolver the server to ask,
	// host:port ("" for the system's: resolvConf); prefix begins every engine's name; template
	// is every engine before its name, URL and role.
	name, resolver, prefix string
	template               config.Engine
	interval, timeout      time.Duration
	retry                  discovery.Backoff
	log                    *slog.Logger
	resolvConf             string
}

// New returns the source of one discovery.dns entry (validated); a failing name is tried again
// after retryInitial, doubling up to retryMax (and never later than its interval).
func New(cfg config.DNSDiscovery, retryInitial, retryMax time.Duration, log *slog.Logger) *Source {
	resolver := cfg.Resolver
	if _, err := netip.ParseAddr(resolver); err == nil {
		resolver = net.JoinHostPort(resolver, "53")
	}
	s := &Source{cfg: cfg, name: strings.TrimSuffix(cfg.Name, ".") + ".", resolver: resolver, prefix: cfg.Prefix(),
		template: cfg.Template.Engine(), interval: cfg.IntervalS.Duration(), timeout: cfg.TimeoutS.Duration(), resolvConf: resolvConf}
	s.retry = discovery.Backoff{Initial: retryInitial, Max: min(retryMax, s.interval)}
	s.log = log.With("source", "dns", "name", s.name)
	return s
}

// Name is "dns <name>".
func (s *Source) Name() string { return "dns " + strings.TrimSuffix(s.name, ".") }

// Run resolves the name every interval until ctx ends, reporting each change and each failure.
func (s *Source) Run(ctx context.Context, report func(discovery.Report)) {
	report = discovery.Changes(report)
	empty := false // the last answer was empty, and said so in the log
	for {
		engines, err := s.resolve(ctx)
		if ctx.Err() != nil {
			return
		}
		wait := s.interval
		if err != nil {
			wait = s.retry.Next()
			s.log.Warn("engine source failing; keeping the engines it last reported", "err", err, "retry_in", wait)
			report(discovery.Report{Err: err})
		} else {
			s.retry.Reset()
			if len(engines) == 0 && !empty {
				s.log.Warn("DNS name has no records: no engines from it until it has", "type", s.cfg.Type)
			}
			empty = len(engines) == 0
			report(discovery.Report{Engines: engines})
		}
		if !discovery.Sleep(ctx, wait) {
			return
		}
	}
}

// resolve asks for the name's records and makes them into engines.
func (s *Source) resolve(ctx context.Context) ([]config.Engine, error) {
	servers, err := s.servers()
	if err != nil {
		return nil, err
	}
	switch s.cfg.Type {
	case config.DNSTypeSRV:
		msg, err := s.query(ctx, servers, s.name, dns.TypeSRV)
		if err != nil || msg == nil {
			return nil, err
		}
		var out []config.Engine
		for _, rr := range msg.Answer {
			srv, ok := rr.(*dns.SRV)
			if !ok || srv.Target == "." {
				continue
			}
			addrs := addresses(msg.Extra, srv.Target)
			if len(addrs) == 0 {
				if addrs, err = s.lookup(ctx, servers, srv.Target); err != nil {
					return nil, err
				}
			}
			for _, a := range addrs {
				out = append(out, s.engine(a, int(srv.Port)))
			}
		}
		return dedupe(out), nil
	default:
		qtype := dns.TypeA
		if s.cfg.Type == config.DNSTypeAAAA {
			qtype = dns.TypeAAAA
		}
		msg, err := s.query(ctx, servers, s.name, qtype)
		if err != nil || msg == nil {
			return nil, err
		}
		var out []config.Engine
		for _, a := range addresses(msg.Answer, "") {
			if a.Is4() == (qtype == dns.TypeA) {
				out = append(out, s.engine(a, s.cfg.Port))
			}
		}
		return dedupe(out), nil
	}
}

// lookup finds an SRV target's addresses the answer did not carry: A records, else AAAA.
func (s *Source) lookup(ctx context.Context, servers []string, target string) ([]netip.Addr, error) {
	for _, qtype := range []uint16{dns.TypeA, dns.TypeAAAA} {
		msg, err := s.query(ctx, servers, target, qtype)
		if err != nil {
			return nil, fmt.Errorf("SRV target %s: %w", target, err)
		}
		if msg != nil {
			if addrs := addresses(msg.Answer, ""); len(addrs) > 0 {
				return addrs, nil
			}
		}
	}
	return nil, nil
}

// addresses are the A and AAAA records among rrs, of owner when owner is not "".
func addresses(rrs []dns.RR, owner string) []netip.Addr {
	var out []netip.Addr
	for _, rr := range rrs {
		if owner != "" && !strings.EqualFold(rr.Header().Name, owner) {
			continue
		}
		var ip net.IP
		switch r := rr.(type) {
		case *dns.A:
			ip = r.A
		case *dns.AAAA:
			ip = r.AAAA
		default:
			continue
		}
		if a, ok := netip.AddrFromSlice(ip); ok {
			out = append(out, a.Unmap())
		}
	}
	return out
}

// dedupe drops a second engine of one name (an address listed twice).
func dedupe(engines []config.Engine) []config.Engine {
	seen := map[string]bool{}
	out := engines[:0]
	for _, e := range engines {
		if !seen[e.Name] {
			seen[e.Name] = true
			out = append(out, e)
		}
	}
	return out
}

// engine is the engine at addr:port: the template with its name, URL and role.
func (s *Source) engine(addr netip.Addr, port int) config.Engine {
	e := s.template.Clone()
	e.Name = EngineName(s.prefix, addr, port)
	e.URL = s.cfg.Scheme + "://" + netip.AddrPortFrom(addr, uint16(port)).String()
	e.Role = s.cfg.Role
	return e
}

// EngineName is the name of the engine at addr:port found through a name whose engine prefix
// is prefix: <prefix>-<address>-<port>, an IPv6 address's ':' written '-', the prefix cut so the
// name fits the 64 characters engine names may have.
func EngineName(prefix string, addr netip.Addr, port int) string {
	rest := "-" + strings.ReplaceAll(addr.String(), ":", "-") + "-" + strconv.Itoa(port)
	if len(prefix)+len(rest) > maxName {
		prefix = prefix[:maxName-len(rest)]
	}
	return prefix + rest
}

// servers are the DNS servers to ask, in order.
func (s *Source) servers() ([]string, error) {
	if s.resolver != "" {
		return []string{s.resolver}, nil
	}
	cc, err := dns.ClientConfigFromFile(s.resolvConf)
	if err != nil {
		return nil, fmt.Errorf("read the system's DNS servers: %w", err)
	}
	if len(cc.Servers) == 0 {
		return nil, fmt.Errorf("%s names no nameserver; set discovery.dns[].resolver", s.resolvConf)
	}
	out := make([]string, 0, len(cc.Servers))
	for _, srv := range cc.Servers {
		out = append(out, net.JoinHostPort(srv, cc.Port))
	}
	return out, nil
}

// query asks servers in turn for name's records of qtype until one answers. A name without
// such records (NXDOMAIN, or an empty answer) is a nil message and no error; SERVFAIL, any
// other failure code or no answer from any server within the timeout is an error.
func (s *Source) query(ctx context.Context, servers []string, name string, qtype uint16) (*dns.Msg, error) {
	req := new(dns.Msg)
	req.SetQuestion(dns.Fqdn(name), qtype)
	req.SetEdns0(4096, false)
	var errs []error
	for _, server := range servers {
		msg, err := s.exchange(ctx, req, server)
		if err != nil {
			errs = append(errs, fmt.Errorf("%s: %w", server, err))
			continue
		}
		switch msg.Rcode {
		case dns.RcodeSuccess:
			if len(msg.Answer) == 0 {
				return nil, nil
			}
			return msg, nil
		case dns.RcodeNameError:
			return nil, nil
		default:
			errs = append(errs, fmt.Errorf("%s answered %s", server, dns.RcodeToString[msg.Rcode]))
		}
		if ctx.Err() != nil {
			break
		}
	}
	return nil, fmt.Errorf("resolve %s %s: %w", name, dns.TypeToString[qtype], errors.Join(errs...))
}

// exchange sends req to server over UDP, and again over TCP when the answer was truncated.
func (s *Source) exchange(ctx context.Context, req *dns.Msg, server string) (*dns.Msg, error) {
	qctx, cancel := context.WithTimeout(ctx, s.timeout)
	defer cancel()
	c := &dns.Client{Timeout: s.timeout, UDPSize: 4096}
	msg, _, err := c.ExchangeContext(qctx, req, server)
	if err == nil && msg.Truncated {
		c.Net = "tcp"
		msg, _, err = c.ExchangeContext(qctx, req, server)
	}
	if err != nil {
		var ne net.Error
		if errors.As(err, &ne) && ne.Timeout() {
			return nil, fmt.Errorf("no answer within %v", s.timeout)
		}
		return nil, err
	}
	return msg, nil
}
