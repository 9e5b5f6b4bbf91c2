package config

import (
	"fmt"
	"strings"
	"testing"

	"github.com/narwhal-router/narwhal/cluster/certs"
)

func TestClusterIsOffByDefaultAndKeepsItsDefaults(t *testing.T) {
	cfg, err := Parse([]byte("cluster: {enabled: true, seeds: [127.0.0.1:7947]}\n"+minimal), noEnv)
	if err != nil {
		t.Fatal(err)
	}
	if Default().Cluster.Enabled {
		t.Fatal("the cluster is on by default")
	}
	c := cfg.Cluster
	if !c.Enabled || c.Provider != ProviderStatic || c.Bind != "127.0.0.1:7946" || c.Node() != "127.0.0.1:7946" || c.VerdictTTLS != 5 {
		t.Fatalf("cluster = %+v", c)
	}
}

func TestClusterValuesSayWhatIsWrong(t *testing.T) {
	for _, tc := range []struct{ yaml, want string }{
		{"cluster: {enabled: true, bind: '0.0.0.0:7946'}", "cluster.advertise: required when cluster.bind"},
		{"cluster: {enabled: true, bind: '127.0.0.1:0'}", "needs a port between 1 and 65535"},
		{"cluster: {enabled: true, provider: consul}", `"consul" is not allowed (allowed: static, etcd)`},
		{"cluster: {enabled: true, provider: etcd}", "cluster.etcd.endpoints: must list at least one etcd endpoint"},
		{"cluster: {enabled: true, seeds: [nohost]}", "cluster.seeds[0]"},
		{"cluster: {enabled: true, heartbeat_interval_s: 1, suspect_after_s: 2}", "must be at least 3 × cluster.heartbeat_interval_s"},
		{"cluster: {enabled: true, verdict_ttl_s: 1, republish_interval_s: 1}", "must be at least 2 × cluster.republish_interval_s"},
		{"cluster: {enabled: true, gossip_intervals: 1}", "gossip_intervals"},
	} {
		_, err := Parse([]byte(tc.yaml+"\n"+minimal), noEnv)
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%s: error %v, want it to say %q", tc.yaml, err, tc.want)
		}
	}
	// A mistake shows before the section is turned on.
	if _, err := Parse([]byte("cluster: {enabled: false, provider: consul}\n"+minimal), noEnv); err == nil {
		t.Fatal("a bad provider in a disabled cluster section passed")
	}
}

// cluster.tls: the three files together, the certificate signed by the CA; and no cluster
// listener beyond loopback without them (issue 26, item 4).
func TestClusterCredentials(t *testing.T) {
	dir := t.TempDir()
	files, err := certs.Write(dir, []string{"a"}, nil)
	if err != nil {
		t.Fatal(err)
	}
	other, err := certs.Write(t.TempDir(), []string{"rogue"}, nil)
	if err != nil {
		t.Fatal(err)
	}
	tlsDoc := func(bind, cert, key, ca string) string {
		return fmt.Sprintf("cluster: {enabled: true, bind: %q, advertise: \"10.0.0.1:7946\", tls: {cert_file: %q, key_file: %q, ca_file: %q}}\n", bind, cert, key, ca) + minimal
	}
	a := files["a"]
	for name, tc := range map[string]struct{ doc, want string }{
		"beyond loopback without credentials": {"cluster: {enabled: true, bind: \"0.0.0.0:7946\", advertise: \"10.0.0.1:7946\"}\n" + minimal, "cluster.tls: required when cluster.bind (\"0.0.0.0:7946\") is reachable beyond this host"},
		"a certificate another CA signed":     {tlsDoc("0.0.0.0:7946", other["rogue"].Cert, other["rogue"].Key, a.CA), "is not signed by ca_file"},
		"a key that is not the certificate's": {tlsDoc("0.0.0.0:7946", a.Cert, other["rogue"].Key, a.CA), "cluster.tls: cert_file"},
		"one file missing":                    {"cluster: {tls: {cert_file: " + a.Cert + "}}\n" + minimal, "needs all of cert_file, key_file and ca_file"},
		"good":                                {tlsDoc("0.0.0.0:7946", a.Cert, a.Key, a.CA), ""},
		"loopback without credentials":        {"cluster: {enabled: true, bind: \"127.0.0.1:7946\"}\n" + minimal, ""},
	} {
		cfg, err := Parse([]byte(tc.doc), noEnv)
		if tc.want == "" {
			if err != nil {
				t.Fatalf("%s: %v", name, err)
			}
			creds, err := cfg.Cluster.TLS.Load()
			if err != nil {
				t.Fatalf("%s: %v", name, err)
			}
			if (creds != nil) != strings.Contains(tc.doc, "tls") {
				t.Fatalf("%s: credentials %v", name, creds)
			}
			continue
		}
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%s: got %v, want %q", name, err, tc.want)
		}
	}
}
