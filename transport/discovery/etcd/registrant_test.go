package etcd

import (
	"context"
	"os/exec"
	"strings"
	"syscall"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/narwhal-router/narwhal/transport/discovery/internal/sourcetest"
)

// registrant runs deploy/etcd-register.sh, the documented registration recipe, as an engine's
// host would; it is stopped (SIGTERM) by the caller or at cleanup.
type registrant struct {
	cmd *exec.Cmd
	out sourcetest.LogBuffer
	end chan struct{}
}

func startRegistrant(t *testing.T, endpoint string, ttl, key, value string) *registrant {
	t.Helper()
	r := &registrant{end: make(chan struct{})}
	r.cmd = exec.Command("sh", "../../../deploy/etcd-register.sh", key, value)
	r.cmd.Env = []string{"PATH=/usr/bin:/bin", "ETCD_ENDPOINT=" + endpoint, "TTL=" + ttl}
	r.cmd.Stdout, r.cmd.Stderr = &r.out, &r.out
	if err := r.cmd.Start(); err != nil {
		t.Fatal(err)
	}
	go func() { r.cmd.Wait(); close(r.end) }()
	t.Cleanup(func() {
		r.cmd.Process.Kill()
		<-r.end
		if t.Failed() {
			t.Logf("etcd-register.sh:\n%s", r.out.String())
		}
	})
	return r
}

// leaseOf is the lease key is registered under now (0: none, or no such key).
func leaseOf(t *testing.T, c *clientv3.Client, key string) clientv3.LeaseID {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel()
	resp, err := c.Get(ctx, key)
	if err != nil || len(resp.Kvs) == 0 {
		return 0
	}
	return clientv3.LeaseID(resp.Kvs[0].Lease)
}

// The registration recipe survives an etcd outage longer than its lease: etcd restarted, the
// recipe registers again under a new lease, and once the old lease has lapsed the engine is still
// in the source's set (a registrant that exits on keep-alive loss left 0 engines here). Stopped,
// it removes the registration at once.
func TestRegistrationRecipeOutlivesAnEtcdOutage(t *testing.T) {
	e := sourcetest.StartEtcd(t)
	c := client(t, e.URL)
	const key = prefix + "d3"
	r := startRegistrant(t, e.URL, "3", key, `{"url": "http://10.0.0.13:8000", "role": "decode", "max_inflight": 256}`)
	var log sourcetest.LogBuffer
	rec := sourcetest.Start(t, newSource(e.URL, &log))
	rec.WaitNames(t, 10*time.Second, "d3")
	first := leaseOf(t, c, key)
	if first == 0 {
		t.Fatal("d3 is not registered under a lease")
	}

	// An outage: the renewals fail while etcd is away (longer than the 3 s lease).
	e.Stop()
	sourcetest.WaitUntil(t, 15*time.Second, "a renewal failed", func() bool { return strings.Contains(r.out.String(), "renewal failed") })
	rec.WaitErr(t, 10*time.Second, "")
	e.Start()

	// Back: registered again under a new lease; the old one (etcd extends a lease across its own
	// restart) lapses, and d3 stays.
	var second clientv3.LeaseID
	sourcetest.WaitUntil(t, 20*time.Second, "d3 registered under a new lease", func() bool {
		second = leaseOf(t, c, key)
		return second != 0 && second != first
	})
	rec.WaitNames(t, 10*time.Second, "d3")
	sourcetest.WaitUntil(t, 20*time.Second, "the old lease lapsed", func() bool {
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
		defer cancel()
		ttl, err := c.TimeToLive(ctx, first)
		return err == nil && ttl.TTL == -1
	})
	if got := leaseOf(t, c, key); got == 0 {
		t.Fatal("d3's registration lapsed after the outage")
	}
	if last, _ := rec.Last(); last.Err != nil || strings.Join(sourcetest.Names(last), " ") != "d3" {
		t.Fatalf("after the old lease lapsed the source reports %s", sourcetest.Describe(last))
	}

	// Stopped: the registration goes at once, not a lease later.
	r.cmd.Process.Signal(syscall.SIGTERM)
	<-r.end
	rec.WaitNames(t, 2*time.Second)
	if !strings.Contains(r.out.String(), "removed") {
		t.Errorf("the registrant did not say it removed d3:\n%s", r.out.String())
	}
}
