package config

import (
	"math"
	"testing"
)

// FuzzParse checks that whatever a configuration file holds, Parse never panics, and that a
// configuration it accepts has only finite durations within the allowed range (a NaN, an Inf or
// an overflowing value must be refused, not turned into a negative time.Duration).
func FuzzParse(f *testing.F) {
	for _, s := range []string{
		minimal,
		"request: {deadline_s: .nan}\n" + minimal,
		"request: {deadline_s: 1e300}\n" + minimal,
		"engine: {first_token_timeout_s: .inf, decode_read_timeout_s: -.inf}\n" + minimal,
		"server: {max_header_bytes: 99999999999999999999}\n" + minimal,
		"server: {client_write_timeout_s: \"30s\"}\n" + minimal,
		"recovery: {retry_budget: {ratio: .nan, min_per_s: .inf}}\n" + minimal,
		"log: {access_log_flush_s: 0x10}\n" + minimal,
		"engines: {name: x}\n",
		"engines:\n  - {name: a, url: \"http://a:1\", role: both, kv: {allowed_endpoints: [\"10.0.0.0/33\", \"h:0\", 1]}}\n",
	} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, in []byte) {
		c, err := Parse(in, func(string) (string, bool) { return "1e300", true })
		if err != nil {
			return
		}
		for name, s := range map[string]Seconds{
			"request.deadline_s": c.Request.DeadlineS, "server.shutdown_grace_s": c.Server.ShutdownGraceS,
			"server.header_timeout_s": c.Server.HeaderTimeoutS, "server.idle_timeout_s": c.Server.IdleTimeoutS,
			"server.client_write_timeout_s": c.Server.ClientWriteTimeoutS, "engine.prefill_timeout_s": c.Engine.PrefillTimeoutS,
			"engine.first_token_timeout_s": c.Engine.FirstTokenTimeoutS, "engine.decode_read_timeout_s": c.Engine.DecodeReadTimeoutS,
			"engine.connect_timeout_s": c.Engine.ConnectTimeoutS, "handoff.max_age_s": c.Handoff.MaxAgeS,
			"recovery.probe_interval_s": c.Recovery.ProbeIntervalS, "admission.queue_timeout_s": c.Admission.QueueTimeoutS,
		} {
			if v := float64(s); math.IsNaN(v) || math.IsInf(v, 0) || v < 0 || v > MaxSeconds || s.Duration() < 0 {
				t.Fatalf("accepted %s: %v from %q", name, v, in)
			}
		}
		if r := c.Recovery.RetryBudget; math.IsNaN(r.Ratio) || math.IsNaN(r.MinPerS) || math.IsInf(r.MinPerS, 0) {
			t.Fatalf("accepted a retry budget %+v from %q", r, in)
		}
		_ = c.Validate(builtin)
	})
}
