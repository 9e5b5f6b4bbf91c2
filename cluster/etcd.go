package cluster

import (
	"context"
	"fmt"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
	"google.golang.org/grpc"

	"github.com/narwhal-router/narwhal/config"
)

// etcd's client waits for a connection without end: with etcd gone, a join would hang in the
// member list, and a rejoin or a shutdown in the deregistration (a node would never exit on
// SIGTERM). So:
//   - the node's client bounds each unary request that has no deadline of its own by
//     cluster.etcd.request_timeout_s (requestDeadline) — the member list, the lease grant, the
//     registration and the deregistration; the watch and lease keep-alive streams are left
//     alone (they end with the membership, etcdMembers);
//   - a join first asks etcd whether it answers (etcdAnswers), so that a node retrying against
//     a dead etcd fails fast;
//   - leaving waits for the deregistration at most cluster.etcd.request_timeout_s, and never
//     past server.shutdown_grace_s on shutdown (incarnation.retire): the lease (etcdLeaseTTL)
//     takes the registration away when the delete does not.

// requestDeadline gives an etcd request without a deadline one of timeout.
func requestDeadline(timeout time.Duration) grpc.UnaryClientInterceptor {
	return func(ctx context.Context, method string, req, reply any, cc *grpc.ClientConn, invoker grpc.UnaryInvoker, opts ...grpc.CallOption) error {
		if _, ok := ctx.Deadline(); !ok {
			var cancel context.CancelFunc
			ctx, cancel = context.WithTimeout(ctx, timeout)
			defer cancel()
		}
		return invoker(ctx, method, req, reply, cc, opts...)
	}
}

// etcdClientConfig is the configuration of every etcd client of the membership.
func etcdClientConfig(cfg config.Cluster) clientv3.Config {
	return clientv3.Config{Endpoints: cfg.Etcd.Endpoints, DialTimeout: cfg.Etcd.DialTimeoutS.Duration(),
		DialOptions: []grpc.DialOption{grpc.WithChainUnaryInterceptor(requestDeadline(cfg.Etcd.RequestTimeoutS.Duration()))}}
}

// etcdAnswers checks that etcd answers a read of the cluster's prefix within the request
// timeout.
func etcdAnswers(client *clientv3.Client, cfg config.Cluster) error {
	ctx, cancel := context.WithTimeout(context.Background(), cfg.Etcd.RequestTimeoutS.Duration())
	defer cancel()
	if _, err := client.Get(ctx, cfg.Etcd.Prefix+"/", clientv3.WithPrefix(), clientv3.WithCountOnly()); err != nil {
		return fmt.Errorf("etcd %v does not answer within %s: %w", cfg.Etcd.Endpoints, cfg.Etcd.RequestTimeoutS.Duration(), err)
	}
	return nil
}
