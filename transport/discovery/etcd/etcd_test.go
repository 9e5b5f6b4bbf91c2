package etcd

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
	"go.uber.org/zap"

	"github.com/narwhal-router/narwhal/config"
	"github.com/narwhal-router/narwhal/transport/discovery/internal/sourcetest"
)

const prefix = "/narwhal/engines/"

func newSource(endpoint string, log *sourcetest.LogBuffer) *Source {
	cfg := config.EtcdDiscovery{Endpoints: []string{endpoint}, Prefix: prefix,
		DialTimeoutS: 1, RequestTimeoutS: 0.5, CheckIntervalS: 0.2}
	return New(cfg, 100*time.Millisecond, 400*time.Millisecond, slog.New(slog.NewTextHandler(log, nil)))
}

// client is the test's own etcd client, as an engine's sidecar would have.
func client(t *testing.T, endpoint string) *clientv3.Client {
	t.Helper()
	c, err := clientv3.New(clientv3.Config{Endpoints: []string{endpoint}, DialTimeout: 5 * time.Second, Logger: zap.NewNop()})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	return c
}

func put(t *testing.T, c *clientv3.Client, key, value string, opts ...clientv3.OpOption) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if _, err := c.Put(ctx, key, value, opts...); err != nil {
		t.Fatalf("put %s: %v", key, err)
	}
}

// Registrations come and go as a user changes them: a leased one leaves when its keepalives
// stop, an updated one is reported with its new value, a malformed one is left out and logged
// naming its key, and the source stops without leaving a goroutine behind.
func TestSourceFollowsRegistrations(t *testing.T) {
	e := sourcetest.StartEtcd(t)
	c := client(t, e.URL)
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	lease, err := c.Grant(ctx, 2)
	if err != nil {
		t.Fatal(err)
	}
	kaCtx, stopKeepAlive := context.WithCancel(context.Background())
	defer stopKeepAlive()
	if _, err := c.KeepAlive(kaCtx, lease.ID); err != nil {
		t.Fatal(err)
	}

	var log sourcetest.LogBuffer
	rec := sourcetest.Start(t, newSource(e.URL, &log))
	rec.WaitNames(t, 5*time.Second) // nothing registered yet: an empty set, not silence

	put(t, c, prefix+"d3", `{"url": "http://10.0.0.3:8000", "role": "decode", "models": ["m"], "max_inflight": 8}`, clientv3.WithLease(lease.ID))
	rep := rec.WaitNames(t, 5*time.Second, "d3")
	if d3 := sourcetest.Engine(t, rep, "d3"); d3.URL != "http://10.0.0.3:8000" || d3.Role != config.RoleDecode || d3.MaxInflight != 8 || len(d3.Models) != 1 {
		t.Fatalf("d3 = %+v", d3)
	}

	// YAML too, with its own name and KV identity.
	put(t, c, prefix+"sidecar-1", "name: p1\nurl: http://10.0.0.1:8000\nrole: prefill\nkv: {engine_id: eid-1, endpoint: 10.0.0.1:5600}\n")
	rep = rec.WaitNames(t, 5*time.Second, "d3", "p1")
	if p1 := sourcetest.Engine(t, rep, "p1"); p1.KV.EngineID != "eid-1" || p1.KV.Endpoint != "10.0.0.1:5600" {
		t.Fatalf("p1 = %+v", p1)
	}

	// An update is the new value.
	put(t, c, prefix+"sidecar-1", `{"name": "p1", "url": "http://10.0.0.11:8000", "role": "prefill"}`)
	rec.Wait(t, 5*time.Second, "p1 at its new URL", func(r sourcetest.Report) bool {
		return r.Err == nil && len(r.Engines) == 2 && r.Engines[1].URL == "http://10.0.0.11:8000"
	})

	// Malformed values are left out, each logged once naming its key and what is wrong.
	put(t, c, prefix+"bad", `{"url": "http://10.0.0.9:8000", "role": "decoder"}`)
	put(t, c, prefix+"typo", `{"url": "http://10.0.0.9:8000", "role": "decode", "max_inflights": 3}`)
	put(t, c, prefix+"dup", `{"name": "d3", "url": "http://10.0.0.8:8000", "role": "decode"}`)
	put(t, c, prefix+"d4", `{"url": "http://10.0.0.4:8000", "role": "decode"}`)
	rec.WaitNames(t, 5*time.Second, "d3", "d4", "p1")
	for _, want := range []string{
		`key=/narwhal/engines/bad`, `role: \"decoder\" is not allowed (allowed: prefill, decode, both)`,
		`key=/narwhal/engines/typo`, `field max_inflights not found`,
		`key=/narwhal/engines/dup`, `engine name \"d3\" is already registered by key /narwhal/engines/d3`,
	} {
		if !strings.Contains(log.String(), want) {
			t.Errorf("the log does not say %q:\n%s", want, log.String())
		}
	}
	if n := strings.Count(log.String(), "key=/narwhal/engines/bad "); n != 1 {
		t.Errorf("the bad key was logged %d times, want once:\n%s", n, log.String())
	}

	// The sidecar stops renewing d3's lease: d3 leaves within the TTL (2 s; etcd checks
	// expiry every 0.5 s), its duplicate takes its name.
	stopKeepAlive()
	rec.Wait(t, 10*time.Second, "d3 gone with its lease", func(r sourcetest.Report) bool {
		return r.Err == nil && strings.Join(sourcetest.Names(r), ",") == "d3,d4,p1" && r.Engines[0].URL == "http://10.0.0.8:8000"
	})

	ctx2, cancel2 := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel2()
	if _, err := c.Delete(ctx2, prefix, clientv3.WithPrefix()); err != nil {
		t.Fatal(err)
	}
	rec.WaitNames(t, 5*time.Second)
	c.Close() // the test's own client, so that only the source's goroutines are left to check
	rec.Stop(t)
}

// etcd going away is an error report within the check interval and request timeout; when it
// answers again the source reports its set afresh, and follows changes again.
func TestSourceReportsAnOutageAndRecovers(t *testing.T) {
	e := sourcetest.StartEtcd(t)
	c := client(t, e.URL)
	put(t, c, prefix+"d1", `{"url": "http://10.0.0.1:8000", "role": "decode"}`)
	put(t, c, prefix+"p1", `{"url": "http://10.0.0.2:8000", "role": "prefill"}`)
	var log sourcetest.LogBuffer
	rec := sourcetest.Start(t, newSource(e.URL, &log))
	rec.WaitNames(t, 5*time.Second, "d1", "p1")

	e.Stop()
	start := time.Now()
	rec.WaitErr(t, 5*time.Second, "etcd")
	t.Logf("outage reported after %v", time.Since(start).Round(time.Millisecond))
	// It keeps trying, and keeps saying so.
	rec.WaitErr(t, 5*time.Second, "etcd")

	e.Start()
	rec.WaitNames(t, 15*time.Second, "d1", "p1")
	put(t, c, prefix+"d2", `{"url": "http://10.0.0.3:8000", "role": "decode"}`)
	rec.WaitNames(t, 10*time.Second, "d1", "d2", "p1")
	if !strings.Contains(log.String(), "engine source failing") {
		t.Errorf("the outage is not in the log:\n%s", log.String())
	}
}

// An etcd that never answers is an error report within the dial timeout, and the source still
// stops at once, leaving no goroutine behind.
func TestSourceUnreachableAtStart(t *testing.T) {
	var log sourcetest.LogBuffer
	rec := sourcetest.Start(t, newSource(fmt.Sprintf("http://127.0.0.1:%d", sourcetest.FreePort(t)), &log))
	rep := rec.WaitErr(t, 5*time.Second, "connect to etcd")
	t.Logf("reported: %v", rep.Err)
	rec.WaitErr(t, 5*time.Second, "connect to etcd") // retried
	rec.Stop(t)
}

func TestParseNamesTheKeyAndTheProblem(t *testing.T) {
	for _, tc := range []struct{ key, value, want string }{
		{prefix + "a", ``, "key /narwhal/engines/a: not an engine (want JSON or YAML in the shape of an engines entry, e.g. {\"url\": \"http://10.0.0.7:8000\", \"role\": \"decode\"}): the value is empty"},
		{prefix + "a", `{"url": "http://x:1"`, "key /narwhal/engines/a: not an engine"},
		{prefix + "a", `[1, 2]`, "key /narwhal/engines/a: not an engine"},
		{prefix + "a", `{"url": "ftp://x", "role": "decode"}`, `key /narwhal/engines/a: url: "ftp://x" is not an engine base URL`},
		{prefix + "pool/a", `{"url": "http://x:1", "role": "decode"}`, `key /narwhal/engines/pool/a: name: "pool/a" is not a usable name`},
		{prefix + "a", `{"url": "http://x:1", "role": "decode", "kv": {"endpoint": "x"}}`, `kv.endpoint: "x" is not an address`},
	} {
		_, err := Parse(tc.key, prefix, []byte(tc.value))
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("Parse(%q) = %v, want an error containing %q", tc.value, err, tc.want)
		}
	}
	e, err := Parse(prefix+"d9", prefix, []byte(`{"url": "http://10.0.0.9:8000", "role": "both", "kv": {"transfer_modes": ["push"]}}`))
	if err != nil || e.Name != "d9" || e.Role != config.RoleBoth || e.KV.TransferModes[0] != "push" {
		t.Fatalf("Parse = %+v, %v", e, err)
	}
}

// A watch that would resume from a revision etcd has compacted away says so (errResync), and
// the session then reads the prefix anew instead of missing the changes in between.
func TestWatchFromACompactedRevisionResyncs(t *testing.T) {
	e := sourcetest.StartEtcd(t)
	c := client(t, e.URL)
	put(t, c, prefix+"d1", `{"url": "http://10.0.0.1:8000", "role": "decode"}`)
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	resp, err := c.Put(ctx, prefix+"d1", `{"url": "http://10.0.0.2:8000", "role": "decode"}`)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := c.Compact(ctx, resp.Header.Revision); err != nil {
		t.Fatal(err)
	}
	var log sourcetest.LogBuffer
	s := newSource(e.URL, &log)
	err = s.watch(ctx, c, nil, resp.Header.Revision-1, func(sourcetest.Report) {})
	if !errors.Is(err, errResync) || !strings.Contains(err.Error(), "was compacted") {
		t.Fatalf("watch from a compacted revision: %v", err)
	}
}
