package transport_test

import (
	"bytes"
	"context"
	"fmt"
	"log/slog"
	"net"
	"net/netip"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/narwhal-router/narwhal/config"
	"github.com/narwhal-router/narwhal/transport"
	"github.com/narwhal-router/narwhal/transport/kv"
)

// names is a resolver answering from a table, counting its lookups; a name mapped to no
// address fails as an unknown host would, and slow names wait for their context's end.
type names struct {
	mu      sync.Mutex
	table   map[string][]netip.Addr
	slow    map[string]bool
	lookups map[string]int
}

func (n *names) LookupNetIP(ctx context.Context, _, host string) ([]netip.Addr, error) {
	n.mu.Lock()
	n.lookups[host]++
	addrs, slow := n.table[host], n.slow[host]
	n.mu.Unlock()
	if slow {
		<-ctx.Done()
		return nil, ctx.Err()
	}
	if len(addrs) == 0 {
		return nil, &net.DNSError{Err: "no such host", Name: host, IsNotFound: true}
	}
	return addrs, nil
}

func (n *names) count(host string) int {
	n.mu.Lock()
	defer n.mu.Unlock()
	return n.lookups[host]
}

// interfaceAddr is an address of one of this host's interfaces other than loopback, if any.
func interfaceAddr() (netip.Addr, bool) {
	addrs, _ := net.InterfaceAddrs()
	for _, a := range addrs {
		if n, ok := a.(*net.IPNet); ok && !n.IP.IsLoopback() {
			if x, ok := netip.AddrFromSlice(n.IP); ok {
				return x.Unmap(), true
			}
		}
	}
	return netip.Addr{}, false
}

// A host name that resolves to this host is refused at the router's listener ports like the
// address itself, from every source, wherever the engine names it (URL, KV pin, KV events); a
// name resolving elsewhere, or not at all, is taken; a name at another port is not looked up.
func TestProvisionerRefusesNamesResolvingToTheRouter(t *testing.T) {
	r := &names{lookups: map[string]int{}, table: map[string][]netip.Addr{
		"router.example":     {netip.MustParseAddr("127.0.0.1")},
		"router6.example":    {netip.MustParseAddr("::1")},
		"mixed.example":      {netip.MustParseAddr("10.0.0.5"), netip.MustParseAddr("127.0.0.1")},
		"any.example":        {netip.MustParseAddr("0.0.0.0")},
		"remote.example":     {netip.MustParseAddr("10.0.0.5")},
		"unresolved.example": nil,
	}}
	if a, ok := interfaceAddr(); ok {
		r.table["iface.example"] = []netip.Addr{a}
	}
	p := transport.NewProvisioner(kv.Builtin(), []int{8000, 8001})
	p.ResolveNames(r, nil)
	base := config.Engine{Name: "e", URL: "http://10.0.0.7:8100", Role: config.RolePrefill}
	with := func(f func(*config.Engine)) config.Engine { e := base; f(&e); return e }
	url := func(host string) config.Engine {
		return with(func(e *config.Engine) { e.URL = "http://" + host })
	}
	cases := []struct {
		name    string
		e       config.Engine
		refused bool
		want    string
	}{
		{"a name of loopback at the client port", url("router.example:8000"), true, "own listener"},
		{"a name of ::1 at the admin port", url("router6.example:8001"), true, "own listener"},
		{"one of its addresses is loopback", url("mixed.example:8000"), true, "own listener"},
		{"a name of the unspecified address", url("any.example:8000"), true, "own listener"},
		{"a name of another host at the router's port", url("remote.example:8000"), false, ""},
		{"a name that does not resolve", url("unresolved.example:8000"), false, ""},
		{"a name of loopback at another port", url("router.example:9000"), false, ""},
		{"a KV pin by name", with(func(e *config.Engine) { e.KV.Endpoint = "router.example:8001" }), true, "kv.endpoint"},
		{"KV events by name", with(func(e *config.Engine) { e.KVEvents.Endpoint = "tcp://router.example:8000" }), true, "kv_events.endpoint"},
	}
	if _, ok := r.table["iface.example"]; ok {
		cases = append(cases, struct {
			name    string
			e       config.Engine
			refused bool
			want    string
		}{"a name of an interface address", url("iface.example:8000"), true, "own listener"})
	}
	for _, tc := range cases {
		for _, src := range all {
			_, err := p.From(src, tc.e)
			switch {
			case tc.refused && (err == nil || !strings.Contains(err.Error(), tc.want)):
				t.Errorf("%s from %s: %v; want refused naming %q", tc.name, src, err, tc.want)
			case !tc.refused && err != nil:
				t.Errorf("%s from %s refused: %v", tc.name, src, err)
			}
		}
	}
	// Each name was looked up once however many sources named it (answers and failures are
	// kept), and none at a port the router does not listen on.
	for _, host := range []string{"router.example", "mixed.example", "unresolved.example"} {
		if n := r.count(host); n != 1 {
			t.Errorf("%s looked up %d times, want once", host, n)
		}
	}
	if n := r.count("remote.example"); n != 1 {
		t.Errorf("remote.example looked up %d times", n)
	}
}

// A name that does not resolve is looked up again once its failure expires (5 s), and each
// failure is logged once, whatever the number of engines or reports naming it.
func TestUnresolvedNamesAreRetriedAndLoggedOnce(t *testing.T) {
	r := &names{lookups: map[string]int{}, table: map[string][]netip.Addr{}}
	var log bytes.Buffer
	p := transport.NewProvisioner(kv.Builtin(), []int{8000})
	p.ResolveNames(r, slog.New(slog.NewTextHandler(&log, nil)))
	now := time.Unix(1000, 0)
	transport.SetNameBounds(p, time.Second, 2*time.Second, func() time.Time { return now })
	e := config.Engine{Name: "d0", URL: "http://later.example:8000", Role: config.RoleDecode}
	for range 50 {
		if _, err := p.From("etcd", e); err != nil {
			t.Fatalf("an unresolved name is refused: %v", err)
		}
	}
	if n, lines := r.count("later.example"), strings.Count(log.String(), "not resolved"); n != 1 || lines != 1 {
		t.Fatalf("%d lookups, %d log lines before the failure expired; want 1 and 1:\n%s", n, lines, log.String())
	}
	now = now.Add(6 * time.Second)
	r.mu.Lock()
	r.table["later.example"] = []netip.Addr{netip.MustParseAddr("127.0.0.1")}
	r.mu.Unlock()
	if _, err := p.From("etcd", e); err == nil || !strings.Contains(err.Error(), "own listener") {
		t.Fatalf("once it resolves to this host: %v; want refused", err)
	}
	if n := r.count("later.example"); n != 2 {
		t.Fatalf("%d lookups after the failure expired, want 2", n)
	}
}

// Lookups are bounded: a DNS server that never answers holds one engine for at most the lookup
// timeout, and a burst of such names for at most the wait budget in all, each engine taken
// unresolved rather than refused.
func TestSlowNamesAreWaitedForWithinTheBudget(t *testing.T) {
	r := &names{lookups: map[string]int{}, table: map[string][]netip.Addr{}, slow: map[string]bool{}}
	const n = 40
	for i := range n {
		r.slow[fmt.Sprintf("slow%d.example", i)] = true
	}
	p := transport.NewProvisioner(kv.Builtin(), []int{8000})
	p.ResolveNames(r, nil)
	const timeout, budget = 50 * time.Millisecond, 200 * time.Millisecond
	transport.SetNameBounds(p, timeout, budget, time.Now)
	began := time.Now()
	for i := range n {
		e := config.Engine{Name: fmt.Sprintf("d%d", i), URL: fmt.Sprintf("http://slow%d.example:8000", i), Role: config.RoleDecode}
		if _, err := p.From("dns", e); err != nil {
			t.Fatalf("a name that timed out is refused: %v", err)
		}
	}
	// Unbounded, the burst would take n × timeout (2 s); the budget cuts it to about 200 ms.
	if took := time.Since(began); took > n*timeout/2 {
		t.Fatalf("%d slow names took %v to provision; the wait budget is %v", n, took, budget)
	}
}
