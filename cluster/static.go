package cluster

import (
	"errors"
	"net"
	"strconv"
	"sync"
	"time"

	"github.com/asynkron/protoactor-go/cluster"
	"google.golang.org/protobuf/proto"
)

// staticProvider is the membership of a static seed list, with no external service. Each node
// sends a small heartbeat datagram (UDP, on the cluster port) to every seed and every peer it
// has heard, every cluster.heartbeat_interval_s; a peer heard within cluster.suspect_after_s is
// a member. It replaces protoactor's automanaged provider, which binds 0.0.0.0, logs every 2 s
// per dead peer and leaves a node that stalled blocked for good: here a node learns from its
// peers' heartbeats that they blocked its identity, and rejoins under a new one (Node.rejoin).
type staticProvider struct {
	n    *Node
	addr string // this node's advertised host:port
	conn *net.UDPConn
	c    *cluster.Cluster
	self *cluster.Member

	mu       sync.Mutex
	peers    map[string]*peer // advertised host:port → what we heard
	seeds    []string
	lastTick time.Time
	// members is the topology last handed to protoactor; dropped are the member ids it has
	// left since, which protoactor blocks for good. (Its BlockList is read without a lock, so
	// this provider keeps its own account instead of asking it.)
	members map[string]bool
	dropped map[string]bool

	// seal and open sign and check heartbeats (auth.go); nil without cluster.tls.
	seal *signer
	open *verifier

	done chan struct{}
	wg   sync.WaitGroup
}

type peer struct {
	addr     string
	udp      *net.UDPAddr
	node     string
	memberID string
	host     string
	port     int
	heard    time.Time
	// stamp is the time stamp of the last signed heartbeat taken from this address: an older
	// one is a replay.
	stamp int64
}

func newStaticProvider(n *Node) *staticProvider {
	p := &staticProvider{n: n, addr: n.advertise, peers: map[string]*peer{}, members: map[string]bool{}, dropped: map[string]bool{}, seeds: n.cfg.Seeds, done: make(chan struct{})}
	if c := n.creds; c != nil {
		p.seal = &signer{creds: c, name: n.cfg.Name, start: time.Now()}
		p.open = &verifier{creds: c, name: n.cfg.Name}
	}
	return p
}

func (p *staticProvider) StartMember(c *cluster.Cluster) error {
	p.c = c
	host, portS, _ := net.SplitHostPort(p.addr)
	port, _ := strconv.Atoi(portS)
	p.self = &cluster.Member{Id: c.ActorSystem.ID, Host: host, Port: int32(port), Kinds: c.GetClusterKinds()}
	laddr, err := net.ResolveUDPAddr("udp", p.n.cfg.Bind)
	if err != nil {
		return err
	}
	if p.conn, err = net.ListenUDP("udp", laddr); err != nil {
		return err
	}
	for _, s := range p.seeds {
		if s == p.addr {
			continue
		}
		if u, err := net.ResolveUDPAddr("udp", s); err == nil {
			p.peers[s] = &peer{addr: s, udp: u}
		} else {
			p.n.log.Warn("cluster seed does not resolve; skipping it", "seed", s, "error", err)
		}
	}
	c.MemberList.UpdateClusterTopology(cluster.Members{p.self})
	p.lastTick = time.Now()
	p.wg.Add(2)
	go p.read()
	go p.tick()
	return nil
}

func (p *staticProvider) StartClient(*cluster.Cluster) error {
	return errors.New("narwhal nodes are cluster members, never clients")
}

func (p *staticProvider) Shutdown(bool) error {
	select {
	case <-p.done:
		return nil
	default:
	}
	close(p.done)
	if p.conn != nil {
		p.conn.Close()
	}
	p.wg.Wait()
	return nil
}

func (p *staticProvider) read() {
	defer p.wg.Done()
	buf := make([]byte, 16<<10) // a signed heartbeat carries its certificate
	for {
		n, from, err := p.conn.ReadFromUDP(buf)
		if err != nil {
			select {
			case <-p.done:
				return
			default:
			}
			if errors.Is(err, net.ErrClosed) {
				return
			}
			continue
		}
		var hb Heartbeat
		if p.n.faults.partitioned() {
			continue // the test hook's partition
		}
		msg, stamp := buf[:n], int64(0)
		if p.open != nil {
			if msg, stamp, err = p.open.open(msg, time.Now()); err != nil {
				p.n.rejected.Add(1)
				continue // unsigned, signed by a certificate the CA did not sign, or stale
			}
		}
		if proto.Unmarshal(msg, &hb) != nil || hb.Cluster != p.n.cfg.Name || hb.MemberId == "" {
			continue // not one of ours: another cluster, or noise
		}
		p.heard(&hb, from, stamp)
	}
}

func (p *staticProvider) heard(hb *Heartbeat, from *net.UDPAddr, stamp int64) {
	addr := net.JoinHostPort(hb.Host, strconv.Itoa(int(hb.Port)))
	if addr == p.addr {
		return
	}
	p.mu.Lock()
	pe := p.peers[addr]
	if pe == nil {
		pe = &peer{addr: addr}
		p.peers[addr] = pe
	}
	if p.open != nil {
		if stamp <= pe.stamp {
			p.mu.Unlock()
			p.n.rejected.Add(1)
			return // a replay: not newer than what this address last said
		}
		pe.stamp = stamp
	}
	pe.udp, pe.node, pe.memberID, pe.host, pe.port, pe.heard = from, hb.Node, hb.MemberId, hb.Host, int(hb.Port), time.Now()
	members := p.memberCountLocked()
	p.mu.Unlock()

	if hb.BlockedId == "" || hb.BlockedId != p.self.Id {
		return
	}
	// A peer dropped this identity (it stalled, or a partition separated us) and protoactor
	// never takes a dropped identity back. If we blocked the peer too, only one side rejoins:
	// the one that sees fewer members, then the higher address.
	p.mu.Lock()
	mutual := p.dropped[hb.MemberId]
	p.mu.Unlock()
	if mutual {
		theirs := int(hb.Members)
		if members > theirs || (members == theirs && p.addr < addr) {
			return
		}
	}
	p.n.rejoin(p.self.Id, "peer "+hb.Node+" had dropped this node's member identity")
}

// memberCountLocked counts this node and the live peers it sees.
func (p *staticProvider) memberCountLocked() int {
	n := 1
	for _, pe := range p.peers {
		if p.liveLocked(pe, time.Now()) {
			n++
		}
	}
	return n
}

func (p *staticProvider) liveLocked(pe *peer, now time.Time) bool {
	return pe.memberID != "" && now.Sub(pe.heard) < p.n.cfg.SuspectAfterS.Duration() && !p.dropped[pe.memberID]
}

func (p *staticProvider) tick() {
	defer p.wg.Done()
	interval := p.n.cfg.HeartbeatIntervalS.Duration()
	t := time.NewTicker(interval)
	defer t.Stop()
	p.beat()
	for {
		select {
		case <-p.done:
			return
		case <-t.C:
			p.beat()
		}
	}
}

// beat sends this round's heartbeats and recomputes the topology.
func (p *staticProvider) beat() {
	now := time.Now()
	p.mu.Lock()
	if interval := p.n.cfg.HeartbeatIntervalS.Duration(); now.Sub(p.lastTick) > 2*interval {
		// This process was not running (stopped, or starved): a peer's silence while we could
		// not listen says nothing about the peer, so that time does not count against it.
		lost := now.Sub(p.lastTick) - interval
		for _, pe := range p.peers {
			if pe.memberID != "" {
				if pe.heard = pe.heard.Add(lost); pe.heard.After(now) {
					pe.heard = now
				}
			}
		}
	}
	p.lastTick = now
	members := cluster.Members{p.self}
	type out struct {
		to *net.UDPAddr
		hb []byte
	}
	var sends []out
	count := p.memberCountLocked()
	for _, pe := range p.peers {
		if pe.udp == nil {
			continue
		}
		hb := &Heartbeat{Cluster: p.n.cfg.Name, Node: p.n.name, MemberId: p.self.Id, Host: p.self.Host,
			Port: p.self.Port, Members: int32(count)}
		if pe.memberID != "" && p.dropped[pe.memberID] {
			hb.BlockedId = pe.memberID
		}
		if b, err := proto.Marshal(hb); err == nil {
			if p.seal != nil {
				if b, err = p.seal.seal(b); err != nil {
					p.n.log.Warn("cluster heartbeat not signed", "error", err)
					continue
				}
			}
			sends = append(sends, out{pe.udp, b})
		}
		if p.liveLocked(pe, now) {
			members = append(members, &cluster.Member{Id: pe.memberID, Host: pe.host, Port: int32(pe.port), Kinds: p.self.Kinds})
		}
	}
	current := make(map[string]bool, len(members))
	for _, m := range members {
		current[m.Id] = true
	}
	for id := range p.members {
		if !current[id] {
			p.dropped[id] = true
		}
	}
	p.members = current
	p.mu.Unlock()
	if p.n.faults.partitioned() {
		sends = nil // the test hook's partition
	}
	for _, s := range sends {
		if _, err := p.conn.WriteToUDP(s.hb, s.to); err != nil && !errors.Is(err, net.ErrClosed) {
			p.n.log.Debug("cluster heartbeat not sent", "to", s.to.String(), "error", err)
		}
	}
	p.c.MemberList.UpdateClusterTopology(members)
}

// addresses are the cluster addresses of every peer this provider has heard or been given.
func (p *staticProvider) addresses() []string {
	p.mu.Lock()
	defer p.mu.Unlock()
	out := make([]string, 0, len(p.peers))
	for a := range p.peers {
		out = append(out, a)
	}
	return out
}

// heartbeats reports when each peer was last heard, for /cluster.
func (p *staticProvider) heartbeats() map[string]time.Time {
	p.mu.Lock()
	defer p.mu.Unlock()
	out := map[string]time.Time{}
	for _, pe := range p.peers {
		if pe.memberID != "" {
			out[pe.memberID] = pe.heard
		}
	}
	return out
}

var _ cluster.ClusterProvider = (*staticProvider)(nil)
