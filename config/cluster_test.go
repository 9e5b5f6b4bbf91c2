package config

import (
	"strings"
	"testing"
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
	if !c.Enabled || c.Provider != ProviderStatic || c.Bind != "127.0.0.1:7946" || c.node() != "127.0.0.1:7946" || c.VerdictTTLS != 5 {
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
