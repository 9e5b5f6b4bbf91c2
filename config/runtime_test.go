package config

import (
	"testing"
	"time"
)

func TestProvisionReadsDurationsAndDerivedValuesOnce(t *testing.T) {
	c := Default()
	c.Engine.DecodeReadTimeoutS = 2.5
	c.Handoff.OnMissing = OnMissingFail
	c.Recovery.ProbeIntervalS = 0.2
	rt := Provision(c)
	if rt.Engine.DecodeRead != 2500*time.Millisecond || rt.Engine.FirstToken != c.Engine.FirstTokenTimeoutS.Duration() {
		t.Fatalf("engine timings %+v", rt.Engine)
	}
	if !rt.Request.FailOnMissing || rt.Request.MaxHandoffAge != c.Handoff.MaxAgeS.Duration() ||
		rt.Request.QueueTimeout != 5*time.Second || rt.Request.MaxAttempts != c.Recovery.MaxAttempts {
		t.Fatalf("request runtime %+v", rt.Request)
	}
	// A sub-second probe interval still tells clients to come back in a whole second.
	if rt.Request.RetryAfter != "1" {
		t.Fatalf("Retry-After %q, want 1", rt.Request.RetryAfter)
	}
	c.Recovery.ProbeIntervalS = 7
	if got := Provision(c).Request.RetryAfter; got != "7" {
		t.Fatalf("Retry-After %q, want 7", got)
	}
	if rt.Server.ShutdownGrace != c.Server.ShutdownGraceS.Duration() || rt.Server.MaxBodyBytes != c.Server.MaxBodyBytes {
		t.Fatalf("server runtime %+v", rt.Server)
	}
}
