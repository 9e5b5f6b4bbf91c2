package cluster

import (
	"context"
	"fmt"
	"log/slog"
	"sync"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
	"google.golang.org/grpc"

	"github.com/narwhal-router/narwhal/config"
)

// protoactor's etcd provider (at the pinned version) makes every etcd request with
// context.TODO(), and etcd's client waits for a connection without end: with etcd gone, a
// join hangs in the member list, and a rejoin or a shutdown hangs in the deregistration (a node
// never exited on SIGTERM). So:
//   - the provider's client bounds each unary request that has no deadline of its own by
//     cluster.etcd.request_timeout_s (requestDeadline) — the member list, the lease grant, the
//     registration and the deregistration; its watch and lease keep-alive streams are left
//     alone (they end with the provider);
//   - a join first asks etcd, on the node's own client, whether it answers (etcdAnswers): the
//     provider's client is never closed by protoactor, so a join that fails after it was made
//     leaves one behind, and a node retrying against a dead etcd would pile them up;
//   - leaving waits for the deregistration at most cluster.etcd.request_timeout_s, and never
//     past server.shutdown_grace_s on shutdown (incarnation.retire): the lease (3 s) takes the
//     registration away when the delete does not.

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

// etcdRefresher works around a start-up race in protoactor's etcd provider (at the pinned
// version): a node lists the members, then starts watching from "now", so a node that
// registers in between is never seen — nodes started together can miss one another for good.
// Re-putting this node's own registration (same value, same lease) every interval makes a Put
// event that every watcher sees, so a missed member is found within one interval. The key is
// the provider's: <prefix>/<cluster>/<cluster>@<member id>.
type etcdRefresher struct {
	client *clientv3.Client // the node's; not closed here
	key    string
	log    *slog.Logger
	ctx    context.Context
	cancel context.CancelFunc
	wg     sync.WaitGroup
}

func startEtcdRefresher(client *clientv3.Client, cfg config.Cluster, memberID string, log *slog.Logger) *etcdRefresher {
	r := &etcdRefresher{client: client, log: log,
		key: cfg.Etcd.Prefix + "/" + cfg.Name + "/" + cfg.Name + "@" + memberID}
	r.ctx, r.cancel = context.WithCancel(context.Background())
	interval := max(time.Second, cfg.SuspectAfterS.Duration())
	r.wg.Add(1)
	go r.run(interval, cfg.Etcd.RequestTimeoutS.Duration())
	return r
}

func (r *etcdRefresher) run(interval, timeout time.Duration) {
	defer r.wg.Done()
	t := time.NewTicker(interval)
	defer t.Stop()
	for {
		select {
		case <-r.ctx.Done():
			return
		case <-t.C:
		}
		ctx, cancel := context.WithTimeout(r.ctx, timeout)
		resp, err := r.client.Get(ctx, r.key)
		if err == nil && len(resp.Kvs) == 1 {
			kv := resp.Kvs[0]
			_, err = r.client.Put(ctx, r.key, string(kv.Value), clientv3.WithLease(clientv3.LeaseID(kv.Lease)))
		}
		cancel()
		if err != nil && r.ctx.Err() == nil {
			r.log.Debug("etcd registration not refreshed", "key", r.key, "error", err)
		}
	}
}

// stop ends the refresher at once, cutting a request in flight.
func (r *etcdRefresher) stop() {
	if r == nil {
		return
	}
	r.cancel()
	r.wg.Wait()
}
