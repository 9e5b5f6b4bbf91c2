package cluster

import (
	"context"
	"log/slog"
	"sync"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/narwhal-router/narwhal/config"
)

// etcdRefresher works around a start-up race in protoactor's etcd provider (at the pinned
// version): a node lists the members, then starts watching from "now", so a node that
// registers in between is never seen — nodes started together can miss one another for good.
// Re-putting this node's own registration (same value, same lease) every interval makes a Put
// event that every watcher sees, so a missed member is found within one interval. The key is
// the provider's: <prefix>/<cluster>/<cluster>@<member id>.
type etcdRefresher struct {
	client *clientv3.Client
	key    string
	log    *slog.Logger
	done   chan struct{}
	wg     sync.WaitGroup
}

func startEtcdRefresher(cfg config.ClusterRuntime, memberID string, log *slog.Logger) (*etcdRefresher, error) {
	client, err := clientv3.New(clientv3.Config{Endpoints: cfg.Etcd.Endpoints, DialTimeout: cfg.Etcd.DialTimeout})
	if err != nil {
		return nil, err
	}
	r := &etcdRefresher{client: client, log: log, done: make(chan struct{}),
		key: cfg.Etcd.Prefix + "/" + cfg.Name + "/" + cfg.Name + "@" + memberID}
	interval := max(time.Second, cfg.SuspectAfter)
	r.wg.Add(1)
	go r.run(interval, cfg.Etcd.DialTimeout)
	return r, nil
}

func (r *etcdRefresher) run(interval, timeout time.Duration) {
	defer r.wg.Done()
	t := time.NewTicker(interval)
	defer t.Stop()
	for {
		select {
		case <-r.done:
			return
		case <-t.C:
		}
		ctx, cancel := context.WithTimeout(context.Background(), timeout)
		resp, err := r.client.Get(ctx, r.key)
		if err == nil && len(resp.Kvs) == 1 {
			kv := resp.Kvs[0]
			_, err = r.client.Put(ctx, r.key, string(kv.Value), clientv3.WithLease(clientv3.LeaseID(kv.Lease)))
		}
		cancel()
		if err != nil {
			r.log.Debug("etcd registration not refreshed", "key", r.key, "error", err)
		}
	}
}

func (r *etcdRefresher) stop() {
	if r == nil {
		return
	}
	close(r.done)
	r.wg.Wait()
	r.client.Close()
}
