package cluster

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"sort"
	"strconv"
	"sync"
	"time"

	"github.com/asynkron/protoactor-go/cluster"
	"go.etcd.io/etcd/api/v3/mvccpb"
	clientv3 "go.etcd.io/etcd/client/v3"
)

// etcdLeaseTTL is how long a registration outlives its node's last keep-alive: a node that
// dies (or stalls) leaves the others' topology within it.
const etcdLeaseTTL = 3 * time.Second

// etcdRetryWait is the pause before a lost watch or a lost lease is set up again.
const etcdRetryWait = time.Second

// etcdMembers is the membership of provider etcd. Each node registers under
// <prefix>/<cluster>/<member id>, on a lease it keeps alive, then lists the prefix and watches
// it from the revision after the listing, so that no registration falls between the two: a
// node that registers before the listing is in it, one that registers after is in the watch.
//
// It replaces protoactor's etcd provider, which lists and then watches from "now" (a member
// registered in between is missed until something rewrites its key), names members
// "<cluster>@<id>" while gossip names them by their actor-system id (gossip then counted the
// node itself among its peers), and makes its etcd requests without a deadline.
type etcdMembers struct {
	n      *Node
	client *clientv3.Client // the node's; not closed here
	self   *cluster.Member
	// topology receives every change of the member list (protoactor's MemberList).
	topology func(cluster.Members)
	dir      string // <prefix>/<cluster>/
	key      string // dir + this member's id

	mu      sync.Mutex
	members map[string]*cluster.Member // member id → member, this node included
	lease   clientv3.LeaseID

	ctx    context.Context
	cancel context.CancelFunc
	wg     sync.WaitGroup
}

// etcdMember is the value of a registration.
type etcdMember struct {
	ID    string   `json:"id"`
	Host  string   `json:"host"`
	Port  int32    `json:"port"`
	Kinds []string `json:"kinds"`
}

func newEtcdMembers(n *Node) *etcdMembers {
	return &etcdMembers{n: n, client: n.etcd, dir: n.cfg.Etcd.Prefix + "/" + n.cfg.Name + "/", members: map[string]*cluster.Member{}}
}

// StartMember registers this node, lists the members and starts watching. An error leaves
// nothing running.
func (p *etcdMembers) StartMember(c *cluster.Cluster) error {
	host, portS, err := net.SplitHostPort(p.n.advertise)
	if err != nil {
		return fmt.Errorf("cluster address %q: %w", p.n.advertise, err)
	}
	port, _ := strconv.Atoi(portS)
	p.init(&cluster.Member{Id: c.ActorSystem.ID, Host: host, Port: int32(port), Kinds: c.GetClusterKinds()},
		c.MemberList.UpdateClusterTopology)
	if err := p.register(); err != nil {
		p.cancel()
		return err
	}
	rev, err := p.list()
	if err != nil {
		p.cancel()
		return err
	}
	p.wg.Add(2)
	go p.watch(rev)
	go p.keepAlive()
	return nil
}

// init sets who this member is and where the topology goes.
func (p *etcdMembers) init(self *cluster.Member, topology func(cluster.Members)) {
	p.self, p.topology = self, topology
	p.key = p.dir + self.Id
	p.ctx, p.cancel = context.WithCancel(context.Background())
}

func (p *etcdMembers) StartClient(*cluster.Cluster) error {
	return errors.New("narwhal nodes are cluster members, never clients")
}

// Shutdown stops watching and keeping the lease, and deletes the registration (a request the
// node's client bounds by cluster.etcd.request_timeout_s; Node.leave may stop waiting sooner —
// the lease ends the registration then).
func (p *etcdMembers) Shutdown(bool) error {
	if p.cancel == nil {
		return nil
	}
	p.cancel()
	p.wg.Wait()
	p.mu.Lock()
	lease := p.lease
	p.mu.Unlock()
	_, err := p.client.Delete(context.Background(), p.key)
	if lease != 0 {
		p.client.Revoke(context.Background(), lease)
	}
	if err != nil {
		return fmt.Errorf("deregister %s from etcd: %w", p.key, err)
	}
	return nil
}

// register puts this member's key on a fresh lease.
func (p *etcdMembers) register() error {
	value, err := json.Marshal(etcdMember{ID: p.self.Id, Host: p.self.Host, Port: p.self.Port, Kinds: p.self.Kinds})
	if err != nil {
		return err
	}
	lease, err := p.client.Grant(p.ctx, int64(etcdLeaseTTL/time.Second))
	if err != nil {
		return fmt.Errorf("etcd lease: %w", err)
	}
	if _, err := p.client.Put(p.ctx, p.key, string(value), clientv3.WithLease(lease.ID)); err != nil {
		return fmt.Errorf("register %s in etcd: %w", p.key, err)
	}
	p.mu.Lock()
	p.lease = lease.ID
	p.mu.Unlock()
	return nil
}

// list replaces the members with etcd's registrations, hands protoactor the topology and
// returns the revision the listing was read at.
func (p *etcdMembers) list() (int64, error) {
	resp, err := p.client.Get(p.ctx, p.dir, clientv3.WithPrefix())
	if err != nil {
		return 0, fmt.Errorf("list cluster members in etcd: %w", err)
	}
	members := map[string]*cluster.Member{p.self.Id: p.self}
	for _, kv := range resp.Kvs {
		if m, ok := p.decode(kv); ok {
			members[m.Id] = m
		}
	}
	p.mu.Lock()
	p.members = members
	p.mu.Unlock()
	p.publish()
	return resp.Header.Revision, nil
}

// decode reads a registration; one that is not a member's is skipped.
func (p *etcdMembers) decode(kv *mvccpb.KeyValue) (*cluster.Member, bool) {
	var m etcdMember
	if err := json.Unmarshal(kv.Value, &m); err != nil || m.ID == "" || m.ID == p.self.Id {
		return nil, false
	}
	return &cluster.Member{Id: m.ID, Host: m.Host, Port: m.Port, Kinds: m.Kinds}, true
}

// watch follows the registrations from the revision after rev. When the watch ends (etcd
// lost, the revision compacted), it lists again and watches from there.
func (p *etcdMembers) watch(rev int64) {
	defer p.wg.Done()
	for p.ctx.Err() == nil {
		err := p.follow(rev)
		if p.ctx.Err() != nil {
			return
		}
		p.n.log.Warn("etcd membership watch ended; listing the members again", "error", err)
		if !p.sleep(etcdRetryWait) {
			return
		}
		if rev, err = p.list(); err != nil {
			p.n.log.Warn("etcd membership not listed", "error", err)
		}
	}
}

// follow applies the watch's events from the revision after rev until the watch ends.
func (p *etcdMembers) follow(rev int64) error {
	if rev == 0 {
		return errors.New("no listing to watch from")
	}
	ctx, cancel := context.WithCancel(clientv3.WithRequireLeader(p.ctx))
	defer cancel()
	for resp := range p.client.Watch(ctx, p.dir, clientv3.WithPrefix(), clientv3.WithRev(rev+1)) {
		if err := resp.Err(); err != nil {
			return err
		}
		changed := false
		p.mu.Lock()
		for _, ev := range resp.Events {
			id := string(ev.Kv.Key[len(p.dir):])
			if id == p.self.Id {
				continue
			}
			switch ev.Type {
			case clientv3.EventTypePut:
				if m, ok := p.decode(ev.Kv); ok {
					p.members[m.Id], changed = m, true
				}
			case clientv3.EventTypeDelete:
				if _, ok := p.members[id]; ok {
					delete(p.members, id)
					changed = true
				}
			}
		}
		p.mu.Unlock()
		if changed {
			p.publish()
		}
	}
	return errors.New("watch closed")
}

// keepAlive renews the lease; when the lease is lost (etcd unreachable for longer than its
// TTL), it registers again on a new one.
func (p *etcdMembers) keepAlive() {
	defer p.wg.Done()
	for p.ctx.Err() == nil {
		p.mu.Lock()
		lease := p.lease
		p.mu.Unlock()
		if lease != 0 {
			if ch, err := p.client.KeepAlive(p.ctx, lease); err == nil {
				for range ch { // drained until the lease is lost or the provider stops
				}
			}
		}
		if p.ctx.Err() != nil || !p.sleep(etcdRetryWait) {
			return
		}
		p.n.log.Warn("etcd lease lost; registering again", "key", p.key)
		if err := p.register(); err != nil {
			p.n.log.Warn("etcd registration failed", "key", p.key, "error", err)
		}
	}
}

// publish hands protoactor the current topology.
func (p *etcdMembers) publish() {
	p.mu.Lock()
	members := make(cluster.Members, 0, len(p.members))
	for _, m := range p.members {
		members = append(members, m)
	}
	p.mu.Unlock()
	sort.Slice(members, func(i, j int) bool { return members[i].Id < members[j].Id })
	p.topology(members)
}

// sleep waits d, or returns false when the provider stops first.
func (p *etcdMembers) sleep(d time.Duration) bool {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-p.ctx.Done():
		return false
	case <-t.C:
		return true
	}
}
