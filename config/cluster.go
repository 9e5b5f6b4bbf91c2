package config

import (
	"net"
	"strconv"
)

// Cluster makes several Narwhal nodes share what each learns about engines. It is off
// by default; a node with it off behaves exactly as a single router.
type Cluster struct {
	Enabled bool   `yaml:"enabled"`
	Name    string `yaml:"name"`
	// NodeName labels this node in verdicts, logs and /cluster; default: the advertised address.
	NodeName string `yaml:"node_name"`
	// Bind is the host:port this node listens on for the cluster: TCP for protoactor's remote
	// (gossip) and, with the static provider, UDP for membership heartbeats on the same port.
	Bind string `yaml:"bind"`
	// Advertise is the host:port peers reach this node on; default: Bind.
	Advertise string `yaml:"advertise"`
	// Provider selects membership: static (a seed list, no external service) or etcd.
	Provider string   `yaml:"provider"`
	Seeds    []string `yaml:"seeds"`
	Etcd     Etcd     `yaml:"etcd"`

	GossipIntervalS    Seconds `yaml:"gossip_interval_s"`
	HeartbeatIntervalS Seconds `yaml:"heartbeat_interval_s"`
	// SuspectAfterS drops a peer not heard from for this long (static provider), and is the
	// stall length after which a node rejoins under a new identity.
	SuspectAfterS Seconds `yaml:"suspect_after_s"`
	// VerdictTTLS is how long a verdict stays valid without being re-published by its node.
	VerdictTTLS Seconds `yaml:"verdict_ttl_s"`
	// RepublishIntervalS re-sends this node's live verdicts (gossip is not acknowledged).
	RepublishIntervalS Seconds `yaml:"republish_interval_s"`
	// TLS are the cluster's credentials (clustertls.go); required to bind beyond loopback.
	TLS ClusterTLS `yaml:"tls"`
}

// Etcd configures the etcd membership provider.
type Etcd struct {
	Endpoints    []string `yaml:"endpoints"`
	Prefix       string   `yaml:"prefix"`
	DialTimeoutS Seconds  `yaml:"dial_timeout_s"`
	// RequestTimeoutS bounds each request the membership makes of etcd (list the members,
	// register, deregister): an etcd that does not answer must not hold a join, a rejoin or a
	// shutdown.
	RequestTimeoutS Seconds `yaml:"request_timeout_s"`
}

// Cluster providers.
const (
	ProviderStatic = "static"
	ProviderEtcd   = "etcd"
)

func defaultCluster() Cluster {
	return Cluster{
		Name:               "narwhal",
		Bind:               "127.0.0.1:7946",
		Provider:           ProviderStatic,
		Etcd:               Etcd{Prefix: "/narwhal", DialTimeoutS: 5, RequestTimeoutS: 2},
		GossipIntervalS:    0.3,
		HeartbeatIntervalS: 0.2,
		SuspectAfterS:      1.5,
		VerdictTTLS:        5,
		RepublishIntervalS: 1,
	}
}

// AdvertiseAddr is the address peers reach this node on: cluster.advertise, else cluster.bind.
func (c Cluster) AdvertiseAddr() string {
	if c.Advertise != "" {
		return c.Advertise
	}
	return c.Bind
}

// Node is this node's name: cluster.node_name, else the advertised address.
func (c Cluster) Node() string {
	if c.NodeName != "" {
		return c.NodeName
	}
	return c.AdvertiseAddr()
}

// check checks the section whether or not it is enabled: turning it on must not be the moment
// a mistake in it shows.
func (c Cluster) check(ck *checker) {
	if c.Name == "" {
		ck.fail("cluster.name", "must not be empty: nodes only join a cluster of the same name")
	}
	ck.clusterAddr("cluster.bind", c.Bind)
	if c.Advertise != "" {
		ck.clusterAddr("cluster.advertise", c.Advertise)
		if host, _, _ := net.SplitHostPort(c.Advertise); host == "" || net.ParseIP(host).IsUnspecified() {
			ck.fail("cluster.advertise", "%q must name an address peers can reach, not an empty or 0.0.0.0 host", c.Advertise)
		}
	} else if host, _, _ := net.SplitHostPort(c.Bind); host == "" || net.ParseIP(host).IsUnspecified() {
		ck.fail("cluster.advertise", "required when cluster.bind (%q) has no specific host: peers need an address to reach this node", c.Bind)
	}
	ck.oneOf("cluster.provider", c.Provider, ProviderStatic, ProviderEtcd)
	ck.checkClusterTLS(c)
	c.checkProvider(ck)
	c.checkIntervals(ck)
}

// checkProvider checks the chosen membership provider's own keys.
func (c Cluster) checkProvider(ck *checker) {
	switch c.Provider {
	case ProviderStatic:
		for i, s := range c.Seeds {
			ck.clusterAddr("cluster.seeds["+strconv.Itoa(i)+"]", s)
		}
	case ProviderEtcd:
		if len(c.Etcd.Endpoints) == 0 {
			ck.fail("cluster.etcd.endpoints", "must list at least one etcd endpoint (e.g. http://127.0.0.1:2379) with provider etcd")
		}
		if c.Etcd.Prefix == "" {
			ck.fail("cluster.etcd.prefix", "must not be empty (e.g. /narwhal)")
		}
		ck.positive("cluster.etcd.dial_timeout_s", c.Etcd.DialTimeoutS)
		ck.positive("cluster.etcd.request_timeout_s", c.Etcd.RequestTimeoutS)
	}
}

// checkIntervals checks the timings, each on its own and against the one it must outlast.
func (c Cluster) checkIntervals(ck *checker) {
	ck.positive("cluster.gossip_interval_s", c.GossipIntervalS)
	ck.positive("cluster.heartbeat_interval_s", c.HeartbeatIntervalS)
	ck.positive("cluster.suspect_after_s", c.SuspectAfterS)
	ck.positive("cluster.verdict_ttl_s", c.VerdictTTLS)
	ck.positive("cluster.republish_interval_s", c.RepublishIntervalS)
	if c.SuspectAfterS > 0 && c.HeartbeatIntervalS > 0 && c.SuspectAfterS < 3*c.HeartbeatIntervalS {
		ck.fail("cluster.suspect_after_s", "must be at least 3 × cluster.heartbeat_interval_s (%v), got %v: one lost heartbeat must not drop a peer",
			float64(3*c.HeartbeatIntervalS), float64(c.SuspectAfterS))
	}
	if c.VerdictTTLS > 0 && c.RepublishIntervalS > 0 && c.VerdictTTLS < 2*c.RepublishIntervalS {
		ck.fail("cluster.verdict_ttl_s", "must be at least 2 × cluster.republish_interval_s (%v), got %v: a live verdict must not expire between two re-publications",
			float64(2*c.RepublishIntervalS), float64(c.VerdictTTLS))
	}
}

func (ck *checker) clusterAddr(path, v string) {
	host, port, err := net.SplitHostPort(v)
	if err != nil {
		ck.fail(path, "%q is not an address; write host:port (e.g. 127.0.0.1:7946)", v)
		return
	}
	_ = host
	if n, err := strconv.Atoi(port); err != nil || n <= 0 || n > 65535 {
		ck.fail(path, "%q needs a port between 1 and 65535: the cluster port cannot be chosen at random, peers name it", v)
	}
}
