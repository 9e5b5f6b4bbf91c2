package tests

import (
	"context"
	"net"
	"net/http"
	"strings"
	"testing"

	"github.com/miekg/dns"
)

// loopNames is a DNS server on loopback answering A queries for its names.
type loopNames struct {
	addr  string
	names map[string]string // fully qualified name → IPv4 address
}

func (n *loopNames) ServeDNS(w dns.ResponseWriter, q *dns.Msg) {
	m := new(dns.Msg)
	m.SetReply(q)
	for _, question := range q.Question {
		if ip, ok := n.names[strings.ToLower(question.Name)]; ok && question.Qtype == dns.TypeA {
			rr, _ := dns.NewRR(question.Name + " 5 IN A " + ip)
			m.Answer = append(m.Answer, rr)
		} else if !ok {
			m.Rcode = dns.RcodeNameError
		}
	}
	w.WriteMsg(m)
}

// startLoopNames serves names over UDP on a free loopback port until the test ends.
func startLoopNames(t *testing.T, names map[string]string) *loopNames {
	t.Helper()
	pc, err := net.ListenPacket("udp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	n := &loopNames{addr: pc.LocalAddr().String(), names: names}
	srv := &dns.Server{PacketConn: pc, Handler: n}
	started := make(chan struct{})
	srv.NotifyStartedFunc = func() { close(started) }
	go srv.ActivateAndServe()
	<-started
	t.Cleanup(func() { srv.Shutdown() })
	return n
}

// resolver resolves through this server only.
func (n *loopNames) resolver() *net.Resolver {
	return &net.Resolver{PreferGo: true, Dial: func(ctx context.Context, _, _ string) (net.Conn, error) {
		var d net.Dialer
		return d.DialContext(ctx, "udp", n.addr)
	}}
}

// A host name a DNS server resolves to this host is a loop too: POST /engines naming the
// router's client port by such a name is refused with a 400 that says why, while a name of
// another host at the same port is taken.
func TestAdminRefusesANameThatResolvesToTheRouter(t *testing.T) {
	ns := startLoopNames(t, map[string]string{"router.narwhal.test.": "127.0.0.1", "elsewhere.narwhal.test.": "192.0.2.7"})
	h := start(t, setup{resolver: ns.resolver()})
	_, clientPort, _ := net.SplitHostPort(h.srv.Addr())
	code, body := h.adminSend("POST", "/engines", `{"name": "self", "url": "http://router.narwhal.test:`+clientPort+`", "role": "both"}`)
	if code != http.StatusBadRequest || !strings.Contains(string(body), "own listener") {
		t.Fatalf("POST /engines naming the router by a name: %d %s; want 400 naming its own listener", code, body)
	}
	code, body = h.adminSend("POST", "/engines", `{"name": "other", "url": "http://elsewhere.narwhal.test:`+clientPort+`", "role": "both", "models": ["m"]}`)
	if code != http.StatusOK && code != http.StatusCreated && code != http.StatusAccepted {
		t.Fatalf("POST /engines naming another host: %d %s", code, body)
	}
	for _, e := range h.engines() {
		if e.Name == "self" {
			t.Fatal("the engine naming the router is in the fleet")
		}
	}
}
