package dns

import (
	"strings"
	"testing"
	"time"

	"github.com/miekg/dns"

	"github.com/narwhal-router/narwhal/config"
	"github.com/narwhal-router/narwhal/transport/discovery/internal/sourcetest"
)

// A DNS record is a registration too: through the real path (a DNS server, the source, the
// catalog, the router's provisioner) an address of this host on the router's own port is
// skipped, shown as a loop; another host on that port is an engine.
func TestRecordsAtTheRoutersListenerAreSkipped(t *testing.T) {
	s := startServer(t)
	const name = "vllm.llm.svc.cluster.local."
	s.set(name, dns.TypeA, name+" 5 IN A 127.0.0.1", name+" 5 IN A 10.0.0.2")
	var log sourcetest.LogBuffer
	cat := sourcetest.Catalog(t, newSource(config.DNSDiscovery{Name: name, Type: config.DNSTypeA, Role: config.RoleBoth,
		Port: 8000, Resolver: s.addr}), &log, 8000)
	sourcetest.WaitUntil(t, 5*time.Second, "both records reported", func() bool {
		st := cat.Status().Sources[0]
		return len(st.Engines)+len(st.Skipped) == 2
	})
	st := cat.Status().Sources[0]
	if len(st.Skipped) != 1 || st.Skipped[0].Name != "vllm-127.0.0.1-8000" || !strings.Contains(st.Skipped[0].Error, "own listener") ||
		len(st.Engines) != 1 || st.Engines[0] != "vllm-10.0.0.2-8000" {
		t.Fatalf("engines %v, skipped %+v", st.Engines, st.Skipped)
	}
	// Re-resolved every interval, the skipped record is logged once.
	sourcetest.WaitUntil(t, 5*time.Second, "more resolutions", func() bool { s.mu.Lock(); defer s.mu.Unlock(); return s.queries > 5 })
	if n := strings.Count(log.String(), "engine skipped"); n != 1 {
		t.Fatalf("the skipped record was logged %d times", n)
	}
}
