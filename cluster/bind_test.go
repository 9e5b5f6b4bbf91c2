package cluster

import (
	"net"
	"strings"
	"testing"
)

// A cluster port another process holds is a start-up error naming the key, not a node that
// silently retries (nothing of protoactor starts before the check).
func TestStartRefusesATakenPort(t *testing.T) {
	addr := freeAddr(t)
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	_, err = Start(provisioned(testConfig(addr, nil)), Options{})
	ln.Close()
	if err == nil || !strings.Contains(err.Error(), "cluster.bind "+addr) {
		t.Fatalf("TCP port taken: error %v, want one naming cluster.bind", err)
	}

	pc, err := net.ListenPacket("udp", addr)
	if err != nil {
		t.Fatal(err)
	}
	defer pc.Close()
	_, err = Start(provisioned(testConfig(addr, nil)), Options{})
	if err == nil || !strings.Contains(err.Error(), "UDP, for heartbeats") {
		t.Fatalf("UDP port taken: error %v, want one naming the heartbeats' UDP port", err)
	}
}
