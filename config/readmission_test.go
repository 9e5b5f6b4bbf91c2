package config

import (
	"strings"
	"testing"
)

func TestReadmissionModeDefaultsToProbeAndIsValidated(t *testing.T) {
	cfg, err := Parse([]byte(minimal), noEnv)
	if err != nil || cfg.Recovery.Readmission != ReadmissionProbe {
		t.Fatalf("default readmission %q, %v", cfg.Recovery.Readmission, err)
	}
	cfg, err = Parse([]byte("recovery: {readmission: health}\n"+minimal), noEnv)
	if err != nil || cfg.Recovery.Readmission != ReadmissionHealth {
		t.Fatalf("opt-in readmission %q, %v", cfg.Recovery.Readmission, err)
	}
	_, err = Parse([]byte("recovery: {readmission: ping}\n"+minimal), noEnv)
	if err == nil || !strings.Contains(err.Error(), `line 1: recovery.readmission: "ping" is not allowed (allowed: probe, health)`) {
		t.Fatalf("bad readmission: %v", err)
	}
}
