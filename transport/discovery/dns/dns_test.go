package dns

import (
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/netip"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/miekg/dns"

	"github.com/narwhal-router/narwhal/config"
	"github.com/narwhal-router/narwhal/transport/discovery/internal/sourcetest"
)

// server is a real DNS server (miekg/dns's, over UDP and TCP on one loopback port) whose zone
// the test changes while the source runs.
type server struct {
	addr    string
	servers []*dns.Server

	mu      sync.Mutex
	records map[string][]dns.RR // "name type" → answer
	extra   map[string][]dns.RR // "name type" → additional section
	rcode   int                 // answered instead of records when not success
	silent  bool                // no answer at all
	queries int
}

func startServer(t *testing.T) *server {
	t.Helper()
	for range 20 {
		if s := tryServerAt("127.0.0.1:0"); s != nil {
			t.Cleanup(s.shutdown)
			return s
		}
	}
	t.Fatal("no loopback port free for both UDP and TCP")
	return nil
}

// tryServerAt serves on addr over UDP and TCP (a port 0 picked for UDP, then taken for TCP
// too), or returns nil when either cannot listen there.
func tryServerAt(addr string) *server {
	udp, err := net.ListenPacket("udp", addr)
	if err != nil {
		return nil
	}
	tcp, err := net.Listen("tcp", udp.LocalAddr().String())
	if err != nil {
		udp.Close()
		return nil
	}
	s := &server{addr: udp.LocalAddr().String(), records: map[string][]dns.RR{}, extra: map[string][]dns.RR{}}
	for _, srv := range []*dns.Server{{PacketConn: udp, Handler: s}, {Listener: tcp, Handler: s}} {
		started := make(chan struct{})
		srv.NotifyStartedFunc = func() { close(started) }
		go srv.ActivateAndServe()
		<-started
		s.servers = append(s.servers, srv)
	}
	return s
}

func (s *server) shutdown() {
	for _, srv := range s.servers {
		srv.Shutdown()
	}
}

func (s *server) ServeDNS(w dns.ResponseWriter, req *dns.Msg) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.queries++
	if s.silent {
		return
	}
	resp := new(dns.Msg)
	resp.SetReply(req)
	q := req.Question[0]
	key := strings.ToLower(q.Name) + " " + dns.TypeToString[q.Qtype]
	switch {
	case s.rcode != dns.RcodeSuccess:
		resp.Rcode = s.rcode
	case s.records[key] == nil && !s.known(q.Name):
		resp.Rcode = dns.RcodeNameError
	default:
		resp.Answer = append(resp.Answer, s.records[key]...)
		resp.Extra = append(resp.Extra, s.extra[key]...)
	}
	if _, udp := w.RemoteAddr().(*net.UDPAddr); udp {
		size := dns.MinMsgSize
		if opt := req.IsEdns0(); opt != nil {
			size = int(opt.UDPSize())
		}
		resp.Truncate(size)
	}
	w.WriteMsg(resp)
}

// known reports whether the zone has any record of name (an empty answer, not NXDOMAIN).
func (s *server) known(name string) bool {
	for k := range s.records {
		if strings.HasPrefix(k, strings.ToLower(name)+" ") {
			return true
		}
	}
	return false
}

// set replaces the records of one name and type; none removes them.
func (s *server) set(name string, qtype uint16, rrs ...string) { s.put(s.records, name, qtype, rrs) }

// setExtra replaces the additional section of the answer for one name and type.
func (s *server) setExtra(name string, qtype uint16, rrs ...string) { s.put(s.extra, name, qtype, rrs) }

func (s *server) put(section map[string][]dns.RR, name string, qtype uint16, rrs []string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	key := strings.ToLower(dns.Fqdn(name)) + " " + dns.TypeToString[qtype]
	delete(section, key)
	for _, r := range rrs {
		section[key] = append(section[key], mustRR(r))
	}
}

func (s *server) fail(rcode int, silent bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.rcode, s.silent = rcode, silent
}

func mustRR(s string) dns.RR {
	rr, err := dns.NewRR(s)
	if err != nil {
		panic(err)
	}
	return rr
}

func newSource(cfg config.DNSDiscovery) *Source {
	if cfg.IntervalS == 0 {
		cfg.IntervalS = 0.1
	}
	if cfg.TimeoutS == 0 {
		cfg.TimeoutS = 0.3
	}
	if cfg.Scheme == "" {
		cfg.Scheme = "http"
	}
	cfg.Template.Models = []string{"m"}
	return New(cfg, 50*time.Millisecond, time.Second, slog.New(slog.NewTextHandler(io.Discard, nil)))
}

// A headless Service's answer changes, fails and comes back: the source reports each new set
// in order, an error for SERVFAIL (the catalog keeps the last set), the set again on recovery,
// an empty set for a name that no longer exists; and it stops leaving nothing running.
func TestARecordsFollowTheAnswer(t *testing.T) {
	s := startServer(t)
	const name = "vllm-decode.llm.svc.cluster.local."
	s.set(name, dns.TypeA, name+" 5 IN A 10.0.0.1", name+" 5 IN A 10.0.0.2")
	rec := sourcetest.Start(t, newSource(config.DNSDiscovery{Name: name, Type: config.DNSTypeA, Role: config.RoleDecode, Port: 8000, Resolver: s.addr}))

	rep := rec.WaitNames(t, 5*time.Second, "vllm-decode-10.0.0.1-8000", "vllm-decode-10.0.0.2-8000")
	if e := sourcetest.Engine(t, rep, "vllm-decode-10.0.0.2-8000"); e.URL != "http://10.0.0.2:8000" || e.Role != config.RoleDecode || !slices.Equal(e.Models, []string{"m"}) {
		t.Fatalf("engine %+v", e)
	}

	s.set(name, dns.TypeA, name+" 5 IN A 10.0.0.3", name+" 5 IN A 10.0.0.2")
	rec.WaitNames(t, 5*time.Second, "vllm-decode-10.0.0.2-8000", "vllm-decode-10.0.0.3-8000")

	s.fail(dns.RcodeServerFailure, false)
	rec.WaitErr(t, 5*time.Second, "answered SERVFAIL")
	s.fail(dns.RcodeSuccess, false)
	rec.WaitNames(t, 5*time.Second, "vllm-decode-10.0.0.2-8000", "vllm-decode-10.0.0.3-8000")

	s.fail(dns.RcodeRefused, false)
	rec.WaitErr(t, 5*time.Second, "answered REFUSED")
	s.fail(dns.RcodeSuccess, false)

	s.set(name, dns.TypeA) // the Service is gone: NXDOMAIN, no engines
	rec.WaitNames(t, 5*time.Second)
	s.set(name, dns.TypeA, name+" 5 IN A 10.0.0.4")
	rec.WaitNames(t, 5*time.Second, "vllm-decode-10.0.0.4-8000")

	// A steady answer is not reported again and again.
	n := rec.Count()
	s.mu.Lock()
	q := s.queries
	s.mu.Unlock()
	sourcetest.WaitUntil(t, 5*time.Second, "a few more resolutions", func() bool { s.mu.Lock(); defer s.mu.Unlock(); return s.queries > q+5 })
	if rec.Count() != n {
		t.Errorf("an unchanged answer was reported %d more times", rec.Count()-n)
	}
	rec.Stop(t)
}

// A server that does not answer is an error within the timeout; the source recovers when it
// answers again.
func TestSilentServerIsAnError(t *testing.T) {
	s := startServer(t)
	const name = "prefill.example."
	s.set(name, dns.TypeA, name+" 5 IN A 10.0.1.1")
	rec := sourcetest.Start(t, newSource(config.DNSDiscovery{Name: name, Type: config.DNSTypeA, Role: config.RolePrefill, Port: 8100, Resolver: s.addr}))
	rec.WaitNames(t, 5*time.Second, "prefill-10.0.1.1-8100")
	s.fail(dns.RcodeSuccess, true)
	rec.WaitErr(t, 5*time.Second, "no answer within 300ms")
	s.fail(dns.RcodeSuccess, false)
	rec.WaitNames(t, 5*time.Second, "prefill-10.0.1.1-8100")

	// Nothing listening at all is an error too.
	addr := fmt.Sprintf("127.0.0.1:%d", sourcetest.FreePort(t))
	rec = sourcetest.Start(t, newSource(config.DNSDiscovery{Name: name, Type: config.DNSTypeA, Role: config.RolePrefill, Port: 8100, Resolver: addr, EnginePrefix: "p"}))
	rec.WaitErr(t, 5*time.Second, "resolve prefill.example. A: "+addr)
}

// SRV records give each target's address and port: from the additional section, or from a
// query for the target; new ports and targets are new engines; a "." target is none.
func TestSRVRecordsFollowTargetsAndPorts(t *testing.T) {
	s := startServer(t)
	const name = "_http._tcp.vllm.service.consul."
	s.set(name, dns.TypeSRV,
		name+" 5 IN SRV 1 1 8000 a.node.consul.",
		name+" 5 IN SRV 1 1 8001 a.node.consul.",
		name+" 5 IN SRV 1 1 9000 b.node.consul.",
		name+" 5 IN SRV 1 1 9000 .")
	s.setExtra(name, dns.TypeSRV, "a.node.consul. 5 IN A 10.1.0.1")
	s.set("b.node.consul.", dns.TypeA, "b.node.consul. 5 IN A 10.1.0.2")
	rec := sourcetest.Start(t, newSource(config.DNSDiscovery{Name: name, Type: config.DNSTypeSRV, Role: config.RoleBoth, Resolver: s.addr, Scheme: "https"}))
	rep := rec.WaitNames(t, 5*time.Second, "vllm-10.1.0.1-8000", "vllm-10.1.0.1-8001", "vllm-10.1.0.2-9000")
	if e := sourcetest.Engine(t, rep, "vllm-10.1.0.2-9000"); e.URL != "https://10.1.0.2:9000" || e.Role != config.RoleBoth {
		t.Fatalf("engine %+v", e)
	}

	s.set(name, dns.TypeSRV, name+" 5 IN SRV 1 1 8002 a.node.consul.", name+" 5 IN SRV 1 1 9000 c.node.consul.")
	s.set("c.node.consul.", dns.TypeAAAA, "c.node.consul. 5 IN AAAA fd00::7")
	rec.WaitNames(t, 5*time.Second, "vllm-10.1.0.1-8002", "vllm-fd00--7-9000")

	s.set(name, dns.TypeSRV) // deregistered: no engines
	rec.WaitNames(t, 5*time.Second)
}

// IPv6 addresses make valid names and bracketed URLs; an answer too large for UDP is read
// again over TCP.
func TestAAAAAndTruncatedAnswers(t *testing.T) {
	s := startServer(t)
	const v6 = "decode6.example."
	s.set(v6, dns.TypeAAAA, v6+" 5 IN AAAA fd00::1", v6+" 5 IN AAAA 2001:db8:ffff:ffff:ffff:ffff:ffff:1")
	rec := sourcetest.Start(t, newSource(config.DNSDiscovery{Name: v6, Type: config.DNSTypeAAAA, Role: config.RoleDecode, Port: 8000, Resolver: s.addr}))
	rep := rec.WaitNames(t, 5*time.Second, "decode6-2001-db8-ffff-ffff-ffff-ffff-ffff-1-8000", "decode6-fd00--1-8000")
	if e := sourcetest.Engine(t, rep, "decode6-fd00--1-8000"); e.URL != "http://[fd00::1]:8000" {
		t.Fatalf("engine %+v", e)
	}
	for _, e := range rep.Engines {
		if err := config.CheckEngine(e, nil); err != nil {
			t.Errorf("engine %s: %v", e.Name, err)
		}
	}

	const big = "big.example."
	var rrs, want []string
	for i := range 400 {
		ip := fmt.Sprintf("10.2.%d.%d", i/250, i%250+1)
		rrs = append(rrs, big+" 5 IN A "+ip)
		want = append(want, "big-"+ip+"-8000")
	}
	slices.Sort(want)
	s.set(big, dns.TypeA, rrs...)
	rec = sourcetest.Start(t, newSource(config.DNSDiscovery{Name: big, Type: config.DNSTypeA, Role: config.RoleDecode, Port: 8000, Resolver: s.addr}))
	rec.WaitNames(t, 5*time.Second, want...)
}

func TestEngineNameFitsTheNameRule(t *testing.T) {
	long := strings.Repeat("a", 24)
	for _, tc := range []struct {
		prefix string
		addr   string
		want   string
	}{
		{"decode", "10.0.0.1", "decode-10.0.0.1-8000"},
		{"decode", "fd00::1", "decode-fd00--1-8000"},
		{long, "2001:db8:ffff:ffff:ffff:ffff:ffff:ffff", long[:20] + "-2001-db8-ffff-ffff-ffff-ffff-ffff-ffff-8000"},
	} {
		got := EngineName(tc.prefix, netip.MustParseAddr(tc.addr), 8000)
		if got != tc.want || len(got) > 64 {
			t.Errorf("EngineName(%q, %s) = %q, want %q", tc.prefix, tc.addr, got, tc.want)
		}
		if err := config.CheckEngine(config.Engine{Name: got, URL: "http://x:1", Role: config.RoleDecode}, nil); err != nil {
			t.Error(err)
		}
	}
}

// Without a resolver the servers of resolv.conf are asked, in order: here a first one where
// nothing listens, then a real one (on port 53, resolv.conf has no port, of a loopback address
// of its own).
func TestSystemResolversFromResolvConf(t *testing.T) {
	var s *server
	for i := range 50 {
		if s = tryServerAt(fmt.Sprintf("127.53.%d.%d:53", time.Now().UnixNano()%200, i+1)); s != nil {
			break
		}
	}
	if s == nil {
		t.Fatal("cannot listen on port 53 of any 127.53.x.y address (the test needs it: resolv.conf has no port)")
	}
	t.Cleanup(s.shutdown)
	const name = "sys.example."
	s.set(name, dns.TypeA, name+" 5 IN A 10.3.0.1")
	host, _, _ := net.SplitHostPort(s.addr)
	path := filepath.Join(t.TempDir(), "resolv.conf")
	if err := os.WriteFile(path, []byte("nameserver 127.53.255.254\nnameserver "+host+"\noptions ndots:5\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	src := newSource(config.DNSDiscovery{Name: name, Type: config.DNSTypeA, Role: config.RoleDecode, Port: 8000})
	src.resolvConf = path
	rec := sourcetest.Start(t, src)
	rec.WaitNames(t, 5*time.Second, "sys-10.3.0.1-8000")
	rec.Stop(t)

	src.resolvConf = filepath.Join(t.TempDir(), "missing")
	rec = sourcetest.Start(t, src)
	rec.WaitErr(t, 5*time.Second, "read the system's DNS servers")
}

// What the source reads of its entry: the name fully qualified, a resolver given as an address
// on port 53, the engine prefix from the first label that is not a service's, the template's
// defaults.
func TestNewReadsItsEntry(t *testing.T) {
	for _, tc := range []struct {
		cfg                    config.DNSDiscovery
		name, resolver, prefix string
	}{
		{config.DNSDiscovery{Name: "vllm-decode.llm.svc.cluster.local", Type: config.DNSTypeA, Port: 8000}, "vllm-decode.llm.svc.cluster.local.", "", "vllm-decode"},
		{config.DNSDiscovery{Name: "_http._tcp.vllm.service.consul.", Type: config.DNSTypeSRV, Resolver: "127.0.0.1:8600"}, "_http._tcp.vllm.service.consul.", "127.0.0.1:8600", "vllm"},
		{config.DNSDiscovery{Name: "other.example", Port: 8000, Resolver: "10.0.0.10", EnginePrefix: "o"}, "other.example.", "10.0.0.10:53", "o"},
		{config.DNSDiscovery{Name: "v6.example", Port: 8000, Resolver: "fd00::53"}, "v6.example.", "[fd00::53]:53", "v6"},
	} {
		s := New(tc.cfg, time.Second, time.Second, slog.New(slog.DiscardHandler))
		if s.name != tc.name || s.resolver != tc.resolver || s.prefix != tc.prefix || s.template.KV.Connector != config.DefaultConnector ||
			s.Name() != "dns "+strings.TrimSuffix(tc.name, ".") {
			t.Errorf("%+v: name %q resolver %q prefix %q template %+v", tc.cfg, s.name, s.resolver, s.prefix, s.template)
		}
	}
}
