package cluster

import (
	"context"
	"encoding/json"
	"fmt"
	"log/slog"
	"net/http"
	"os/exec"
	"path/filepath"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/asynkron/protoactor-go/cluster"
	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/narwhal-router/narwhal/config"
)

// startEtcd runs a real etcd (Debian's etcd-server package; .ci/run installs it) on free
// loopback ports with a data directory of its own, and returns its client URL.
func startEtcd(t *testing.T) string {
	t.Helper()
	return startEtcdAt(t, "http://"+freeAddr(t))
}

func etcdBinary(t *testing.T) string {
	t.Helper()
	bin, err := exec.LookPath("etcd")
	if err != nil {
		t.Skip("etcd is not installed (apt-get install etcd-server): skipping the etcd provider test")
	}
	return bin
}

func startEtcdAt(t *testing.T, client string) string {
	t.Helper()
	bin := etcdBinary(t)
	peer := "http://" + freeAddr(t)
	dir := t.TempDir()
	cmd := exec.Command(bin, "--name", "default", "--data-dir", filepath.Join(dir, "data"),
		"--listen-client-urls", client, "--advertise-client-urls", client,
		"--listen-peer-urls", peer, "--initial-advertise-peer-urls", peer,
		"--initial-cluster", "default="+peer, "--log-level", "error")
	if err := cmd.Start(); err != nil {
		t.Fatalf("start etcd: %v", err)
	}
	t.Cleanup(func() { cmd.Process.Kill(); cmd.Wait() })
	waitFor(t, 15*time.Second, "etcd answers /health", func() bool {
		resp, err := http.Get(client + "/health")
		if err != nil {
			return false
		}
		resp.Body.Close()
		return resp.StatusCode == http.StatusOK
	})
	return client
}

func TestEtcdProviderSharesVerdicts(t *testing.T) {
	endpoint := startEtcd(t)
	prefix := fmt.Sprintf("/narwhal-test-%d", time.Now().UnixNano())
	cfg := func(bind string, _ []string) config.Cluster {
		c := testConfig(bind, nil)
		c.Provider = config.ProviderEtcd
		c.Etcd.Endpoints = []string{endpoint}
		c.Etcd.Prefix = prefix
		return c
	}
	nodes, _ := startTrio(t, cfg)
	checkSharing(t, nodes, func() *proc { return startProc(t, cfg(freeAddr(t), nil)) })
}

// A node whose etcd does not answer still starts (it routes on its own view) and joins once
// etcd is there.
func TestEtcdUnreachableAtStartJoinsLater(t *testing.T) {
	etcdBinary(t)
	client := "http://" + freeAddr(t)
	c := testConfig(freeAddr(t), nil)
	c.Provider = config.ProviderEtcd
	c.Etcd.Endpoints = []string{client}
	c.Etcd.Prefix = fmt.Sprintf("/narwhal-test-%d", time.Now().UnixNano())
	c.Etcd.DialTimeoutS = 1
	n := startProc(t, c)
	if st := n.status(); st.Joined {
		t.Fatalf("joined without an etcd: %+v", st)
	}
	startEtcdAt(t, client)
	waitFor(t, 20*time.Second, "the node joins once etcd answers", func() bool { return n.status().Joined })
}

// A node that registers after another listed the members, but before that one's watch began,
// is seen: the watch starts at the revision after the listing. (protoactor's provider watched
// from "now" and lost such a node until its key was written again — a verdict then took a
// refresh interval and a gossip tick, about 1.3 s, to reach it.)
func TestEtcdMembersSeeARegistrationMadeBeforeTheWatchStarts(t *testing.T) {
	endpoint := startEtcd(t)
	c := testConfig(freeAddr(t), nil)
	c.Provider = config.ProviderEtcd
	c.Etcd.Endpoints = []string{endpoint}
	c.Etcd.Prefix = fmt.Sprintf("/narwhal-test-%d", time.Now().UnixNano())
	c = provisioned(c)
	client, err := clientv3.New(etcdClientConfig(c))
	if err != nil {
		t.Fatal(err)
	}
	defer client.Close()
	p := newEtcdMembers(&Node{cfg: c, etcd: client, log: slog.New(slog.DiscardHandler)})
	var mu sync.Mutex
	var seen []string
	p.init(&cluster.Member{Id: "a", Host: "127.0.0.1", Port: 1}, func(ms cluster.Members) {
		mu.Lock()
		defer mu.Unlock()
		seen = seen[:0]
		for _, m := range ms {
			seen = append(seen, m.Id)
		}
	})
	has := func(want ...string) func() bool {
		return func() bool { mu.Lock(); defer mu.Unlock(); return slices.Equal(seen, want) }
	}
	if err := p.register(); err != nil {
		t.Fatal(err)
	}
	rev, err := p.list()
	if err != nil {
		t.Fatal(err)
	}
	b, _ := json.Marshal(etcdMember{ID: "b", Host: "127.0.0.1", Port: 2})
	if _, err := client.Put(context.Background(), p.dir+"b", string(b)); err != nil {
		t.Fatal(err)
	}
	p.wg.Add(1)
	go p.watch(rev)
	waitFor(t, 5*time.Second, "the member registered between the listing and the watch is seen", has("a", "b"))
	if _, err := client.Delete(context.Background(), p.dir+"b"); err != nil {
		t.Fatal(err)
	}
	waitFor(t, 5*time.Second, "the deregistered member leaves", has("a"))
	if err := p.Shutdown(false); err != nil {
		t.Fatal(err)
	}
	if resp, err := client.Get(context.Background(), p.key); err != nil || len(resp.Kvs) != 0 {
		t.Fatalf("registration after shutdown: %v, %v", resp, err)
	}
}
