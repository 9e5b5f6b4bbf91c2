package config

import (
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"net"
	"os"
	"strings"
)

// ClusterTLS names the cluster's credentials: this node's certificate and key, and the CA that
// signed every node's. With them the cluster's traffic — gossip and verdicts over protoactor's
// gRPC remote, and the static provider's heartbeats — is authenticated both ways and the gRPC
// traffic encrypted: a process without a certificate the CA signed cannot join, gossip or
// publish a verdict. `narwhal cluster certs --out DIR` makes a CA and node certificates for a
// test cluster.
type ClusterTLS struct {
	CertFile string `yaml:"cert_file,omitempty"`
	KeyFile  string `yaml:"key_file,omitempty"`
	CAFile   string `yaml:"ca_file,omitempty"`
}

func (t ClusterTLS) set() bool { return t.CertFile != "" || t.KeyFile != "" || t.CAFile != "" }

// ClusterCredentials are cluster.tls's files, read and checked (Load).
type ClusterCredentials struct {
	Certificate tls.Certificate
	// Leaf is Certificate's own certificate, parsed.
	Leaf *x509.Certificate
	CAs  *x509.CertPool
}

// Load reads and checks the three files, nil when none is set: the pair must match and the CA
// must have signed the node's certificate. Validation loads them once to check them; the
// cluster loads them again when it starts.
func (t ClusterTLS) Load() (*ClusterCredentials, error) {
	if !t.set() {
		return nil, nil
	}
	return t.load()
}

// load reads and checks the three files.
func (t ClusterTLS) load() (*ClusterCredentials, error) {
	if t.CertFile == "" || t.KeyFile == "" || t.CAFile == "" {
		return nil, errors.New("needs all of cert_file, key_file and ca_file")
	}
	pair, err := tls.LoadX509KeyPair(t.CertFile, t.KeyFile)
	if err != nil {
		return nil, fmt.Errorf("cert_file %s and key_file %s: %w", t.CertFile, t.KeyFile, err)
	}
	leaf, err := x509.ParseCertificate(pair.Certificate[0])
	if err != nil {
		return nil, fmt.Errorf("cert_file %s: %w", t.CertFile, err)
	}
	ca, err := os.ReadFile(t.CAFile)
	if err != nil {
		return nil, fmt.Errorf("ca_file: %w", err)
	}
	pool := x509.NewCertPool()
	if !pool.AppendCertsFromPEM(ca) {
		return nil, fmt.Errorf("ca_file %s holds no PEM certificate", t.CAFile)
	}
	if _, err := leaf.Verify(x509.VerifyOptions{Roots: pool, KeyUsages: []x509.ExtKeyUsage{x509.ExtKeyUsageAny}}); err != nil {
		return nil, fmt.Errorf("cert_file %s is not signed by ca_file %s: %w", t.CertFile, t.CAFile, err)
	}
	pair.Leaf = leaf
	return &ClusterCredentials{Certificate: pair, Leaf: leaf, CAs: pool}, nil
}

// checkClusterTLS records cluster.tls problems, and refuses a cluster listener reachable beyond
// this host without credentials: anyone who could reach it could join and eject engines on every
// node.
func (ck *checker) checkClusterTLS(c Cluster) {
	if c.TLS.set() {
		if _, err := c.TLS.load(); err != nil {
			ck.fail("cluster.tls", "%v", err)
		}
		return
	}
	if c.Enabled && !loopbackHost(c.Bind) {
		ck.fail("cluster.tls", "required when cluster.bind (%q) is reachable beyond this host: without credentials any process that reaches the port could join the cluster and eject engines on every node; set cert_file, key_file and ca_file (narwhal cluster certs --out DIR makes test ones) or bind 127.0.0.1", c.Bind)
	}
}

// loopbackHost reports whether the host of addr accepts only local connections.
func loopbackHost(addr string) bool {
	host, _, err := net.SplitHostPort(addr)
	if err != nil {
		return false
	}
	if strings.EqualFold(host, "localhost") {
		return true
	}
	ip := net.ParseIP(host)
	return ip != nil && ip.IsLoopback()
}
