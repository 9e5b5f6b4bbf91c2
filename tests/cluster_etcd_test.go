package tests

import (
	"syscall"
	"testing"
	"time"

	"github.com/narwhal-router/narwhal/config"
)

// startEtcdServer runs a real etcd on free loopback ports (runEtcd) and returns its client URL.
func startEtcdServer(t *testing.T) string {
	t.Helper()
	return runEtcd(t).client
}

func TestClusterWithEtcdProvider(t *testing.T) {
	c := startCluster(t, clusterSetup{nodes: 3, etcd: []string{startEtcdServer(t)}})
	if st := c.nodes[0].status(); st.Provider != config.ProviderEtcd {
		t.Fatalf("provider %q, want etcd", st.Provider)
	}
	checkFleetWideEjection(t, c, "d0")

	// A stall that outlives the node's etcd lease (3 s): once the others dropped it, it runs
	// again and rejoins under a new identity.
	s := c.nodes[2]
	gen := s.status().Generation
	s.cmd.Process.Signal(syscall.SIGSTOP)
	c.waitMembers(2, 8*time.Second, c.nodes[0], c.nodes[1])
	s.cmd.Process.Signal(syscall.SIGCONT)
	c.waitMembers(3, 10*time.Second)
	if st := s.status(); st.Generation != gen+1 || st.Stalls != 1 {
		t.Fatalf("after a stall past its etcd lease: %+v", st)
	}
	s.watchState("d0", "ejected", 2*time.Second)
}
