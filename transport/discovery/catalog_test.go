package discovery

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/narwhal-router/narwhal/config"
	"github.com/narwhal-router/narwhal/internal/testwait"
	"github.com/narwhal-router/narwhal/transport"
	"github.com/narwhal-router/narwhal/transport/kv"
)

// pushSource is a source whose reports the test makes: what a watch of Kubernetes, DNS or etcd
// would report, without one.
type pushSource struct {
	name string
	ch   chan Report
	ack  chan struct{}
}

func newPush(name string) *pushSource {
	return &pushSource{name: name, ch: make(chan Report), ack: make(chan struct{})}
}

func (p *pushSource) Name() string { return p.name }

func (p *pushSource) Run(ctx context.Context, report func(Report)) {
	for {
		select {
		case <-ctx.Done():
			return
		case r := <-p.ch:
			report(r)
			p.ack <- struct{}{}
		}
	}
}

// push hands the catalog r and returns once it took it.
func (p *pushSource) push(r Report) { p.ch <- r; <-p.ack }

// fleetLog records every fleet the catalog applies.
type fleetLog struct {
	mu     sync.Mutex
	fleets [][]transport.EngineSpec
}

func (f *fleetLog) apply(specs []transport.EngineSpec) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.fleets = append(f.fleets, specs)
	return nil
}

func (f *fleetLog) last() []string {
	f.mu.Lock()
	defer f.mu.Unlock()
	if len(f.fleets) == 0 {
		return nil
	}
	var out []string
	for _, e := range f.fleets[len(f.fleets)-1] {
		out = append(out, e.Name+"@"+e.Source)
	}
	return out
}

func (f *fleetLog) count() int {
	f.mu.Lock()
	defer f.mu.Unlock()
	return len(f.fleets)
}

func engine(name, url string) config.Engine {
	return config.Engine{Name: name, URL: url, Role: config.RoleDecode, Models: []string{"m"}}
}

func sourceStatus(t *testing.T, c *Catalog, name string) SourceStatus {
	t.Helper()
	for _, s := range c.Status().Sources {
		if s.Name == name {
			return s
		}
	}
	t.Fatalf("no source %s in %+v", name, c.Status())
	return SourceStatus{}
}

func waitCount(t *testing.T, f *fleetLog, n int) {
	t.Helper()
	testwait.UntilEvery(t, 3*time.Second, 2*time.Millisecond, func() bool { return f.count() >= n },
		func() string { return fmt.Sprintf("%d fleets applied, want %d", f.count(), n) })
}

// The catalog merges its sources in order, keeps a failing source's last good set (and says
// so), skips what does not provision with its error, and gives a name two sources report to
// the first of them.
func TestCatalogMergesKeepsAndSkips(t *testing.T) {
	file := NewFileSource([]config.Engine{engine("d0", "http://10.0.0.1:8000")})
	var c *Catalog
	admins := NewAdminSource(func(name string) string { return c.Owner(name) })
	dns := newPush("dns decode.svc")
	applied := &fleetLog{}
	var err error
	c, err = NewCatalog([]Source{file, admins, dns}, Options{Engines: builtin, Apply: applied.apply})
	if err != nil {
		t.Fatal(err)
	}
	c.Start()
	defer c.Close()
	if got := c.Owner("d0"); got != SourceFile {
		t.Fatalf("the file's engine is owned by %q before anything ran", got)
	}

	dns.push(Report{Engines: []config.Engine{
		engine("d1", "http://10.0.0.2:8000"),
		engine("d0", "http://10.0.0.9:8000"),                                   // the file's name: the file wins
		{Name: "bad", URL: "http://10.0.0.3:8000/v1", Role: config.RoleDecode}, // a path: not provisioned
		{Name: "tcp", URL: "http://10.0.0.4:8000", Role: config.RoleDecode, KV: config.KV{Connector: "tcp"}},
	}})
	waitCount(t, applied, 1)
	if got := strings.Join(applied.last(), " "); got != "d0@file d1@dns decode.svc" {
		t.Fatalf("applied %s", got)
	}
	st := sourceStatus(t, c, "dns decode.svc")
	if !st.Up || len(st.Skipped) != 2 || !strings.Contains(st.Skipped[0].Error, "not an engine base URL") ||
		!strings.Contains(st.Skipped[1].Error, `kv.connector: "tcp" is not allowed`) ||
		len(st.Conflicts) != 1 || st.Conflicts[0] != (Conflict{Name: "d0", Winner: SourceFile}) {
		t.Fatalf("dns status %+v", st)
	}

	// The source fails: its last set stays in the fleet, and it says so.
	dns.push(Report{Err: errors.New("SERVFAIL")})
	st = sourceStatus(t, c, "dns decode.svc")
	if st.Up || st.Error != "SERVFAIL" || st.Errors != 1 || !strings.Contains(st.StaleReason, "keeps the 2 engines") {
		t.Fatalf("failing dns status %+v", st)
	}
	if applied.count() != 1 {
		t.Fatalf("a failing source changed the fleet: %v", applied.last())
	}

	// The admin API may not take a name another source reports; its own engines join.
	if err := admins.Add(engine("d1", "http://10.0.0.5:8000")); !errors.Is(err, ErrOwnedElsewhere) || !strings.Contains(err.Error(), "dns decode.svc") {
		t.Fatalf("admin add of a dns engine: %v", err)
	}
	if err := admins.Add(engine("a0", "http://10.0.0.6:8000")); err != nil {
		t.Fatal(err)
	}
	if got := strings.Join(applied.last(), " "); got != "d0@file a0@admin d1@dns decode.svc" {
		t.Fatalf("applied %s", got)
	}
	if err := admins.Remove("d0"); !errors.Is(err, ErrOwnedElsewhere) {
		t.Fatalf("admin remove of the file's engine: %v", err)
	}
	if err := admins.Remove("zz"); !errors.Is(err, ErrNotAdded) {
		t.Fatalf("admin remove of an unknown engine: %v", err)
	}

	// The source comes back without d1: d1 leaves the fleet. A reload drops d0 from the file:
	// the dns engine of that name takes its place.
	dns.push(Report{Engines: []config.Engine{engine("d0", "http://10.0.0.9:8000")}})
	file.Set(nil)
	waitCount(t, applied, 4)
	if got := strings.Join(applied.last(), " "); got != "a0@admin d0@dns decode.svc" {
		t.Fatalf("applied %s after %v", got, applied.fleets)
	}
	if err := admins.Remove("a0"); err != nil {
		t.Fatal(err)
	}
	if got := strings.Join(applied.last(), " "); got != "d0@dns decode.svc" {
		t.Fatalf("applied %s", got)
	}
}

// A report that changes nothing applies nothing: the router is told only of real changes.
func TestCatalogAppliesOnlyChanges(t *testing.T) {
	src := newPush("etcd /x")
	applied := &fleetLog{}
	c, err := NewCatalog([]Source{src}, Options{Engines: builtin, Apply: applied.apply})
	if err != nil {
		t.Fatal(err)
	}
	c.Start()
	defer c.Close()
	set := Report{Engines: []config.Engine{engine("d0", "http://10.0.0.1:8000")}}
	src.push(set)
	src.push(set)
	if applied.count() != 1 {
		t.Fatalf("%d fleets applied for one change", applied.count())
	}
	if _, err := NewCatalog([]Source{src, newPush("etcd /x")}, Options{}); err == nil {
		t.Fatal("two sources of one name accepted")
	}
}

// builtin provisions engines with Narwhal's own connectors, as a router without listeners would.
var builtin = transport.NewProvisioner(kv.Builtin(), nil)
