//go:build !clusterfaults

package cluster

import (
	"context"
	"net"

	"google.golang.org/grpc/credentials"
)

// FaultHookCompiled says this build has the partition hook (FaultFileEnv): this one does not.
const FaultHookCompiled = false

// faults is the partition hook, absent from this build: a node's is always nil.
type faults struct{}

func startFaults() *faults        { return nil }
func (*faults) stop()             {}
func (*faults) partitioned() bool { return false }
func (*faults) dialer(dial func(context.Context, string) (net.Conn, error)) func(context.Context, string) (net.Conn, error) {
	return dial
}
func (*faults) serverCreds(c credentials.TransportCredentials) credentials.TransportCredentials {
	return c
}
