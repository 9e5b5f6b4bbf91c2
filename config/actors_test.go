package config

import (
	"testing"
	"time"
)

// The actors' forms of the request and recovery sections convert every duration once.
func TestActorsRuntimeForms(t *testing.T) {
	c := withEngines(Default())
	c.Handoff.OnMissing = OnMissingFail
	c.Recovery.ProbeIntervalS = 0.2
	c.Placement.ScrapeStaleS = 2.5
	r := c.RequestRuntime()
	if !r.FailOnMissing || r.MaxHandoffAge != c.Handoff.MaxAgeS.Duration() || r.Deadline != 600*time.Second ||
		r.QueueTimeout != 5*time.Second || r.MaxAttempts != c.Recovery.MaxAttempts {
		t.Fatalf("request runtime %+v", r)
	}
	// A sub-second probe interval still tells clients to come back in a whole second.
	if r.RetryAfter != "1" {
		t.Fatalf("Retry-After %q, want 1", r.RetryAfter)
	}
	c.Recovery.ProbeIntervalS = 7
	if got := c.RequestRuntime().RetryAfter; got != "7" {
		t.Fatalf("Retry-After %q, want 7", got)
	}
	if f := c.FleetRuntime(); f.ScrapeStale != 2500*time.Millisecond || f.KVEvents.MaxBlocks != 1<<20 || f.KVEvents.ReplayTimeout != 2*time.Second {
		t.Fatalf("fleet runtime %+v", f)
	}
	if rec := c.RecoveryRuntime(); rec.ProbeInterval != 7*time.Second || rec.Backpressure.MaxPass != 30*time.Second || rec.ReadmitByHealth() {
		t.Fatalf("recovery runtime %+v", rec)
	}
}

// The cluster's derived names: the advertised address defaults to the bind address, the node's
// name to the advertised address.
func TestClusterDerivedNames(t *testing.T) {
	c := Default().Cluster
	if c.AdvertiseAddr() != c.Bind || c.Node() != c.Bind {
		t.Fatalf("advertise %q, node %q", c.AdvertiseAddr(), c.Node())
	}
	c.Advertise = "10.0.0.1:7946"
	if c.Node() != "10.0.0.1:7946" {
		t.Fatalf("node %q", c.Node())
	}
	c.NodeName = "a"
	if c.Node() != "a" || c.AdvertiseAddr() != "10.0.0.1:7946" {
		t.Fatalf("node %q, advertise %q", c.Node(), c.AdvertiseAddr())
	}
}
