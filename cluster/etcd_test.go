package cluster

import (
	"fmt"
	"net/http"
	"os/exec"
	"path/filepath"
	"testing"
	"time"

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
