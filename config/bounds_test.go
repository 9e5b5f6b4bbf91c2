package config

import (
	"strings"
	"testing"
)

// Durations that are not finite, or that would overflow a time.Duration, are refused with the
// key, the line and the allowed range (issue 12, item 7).
func TestNonFiniteAndOverflowingDurationsRejected(t *testing.T) {
	cases := []struct{ name, yaml, want string }{
		{"nan deadline", "request:\n  deadline_s: .nan\n", "line 2: request.deadline_s: NaN is not allowed; want a number of seconds greater than 0 and at most 31536000"},
		{"inf first token", "engine:\n  first_token_timeout_s: .inf\n", "line 2: engine.first_token_timeout_s: +Inf is not allowed"},
		{"-inf grace", "server:\n  shutdown_grace_s: -.inf\n", "line 2: server.shutdown_grace_s: -Inf is not allowed; want a number of seconds from 0 to 31536000"},
		{"overflow deadline", "request:\n  deadline_s: 1e300\n", "line 2: request.deadline_s: 1e+300 is not allowed"},
		{"just over a year", "handoff:\n  max_age_s: 31536001\n", "line 2: handoff.max_age_s: 3.1536001e+07 is not allowed"},
		{"nan ratio", "recovery:\n  retry_budget: {ratio: .nan}\n", "line 2: recovery.retry_budget.ratio"},
		{"nan flush", "log:\n  access_log_flush_s: .nan\n", "line 2: log.access_log_flush_s"},
		{"nan probe interval", "recovery:\n  probe_interval_s: .nan\n", "line 2: recovery.probe_interval_s: NaN is not allowed"},
		{"inf client write timeout", "server:\n  client_write_timeout_s: .inf\n", "line 2: server.client_write_timeout_s: +Inf is not allowed"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			_, err := Parse([]byte(tc.yaml+minimal), noEnv)
			if err == nil {
				t.Fatal("accepted")
			}
			if !strings.Contains(err.Error(), tc.want) {
				t.Errorf("error %q does not contain %q", err, tc.want)
			}
		})
	}
	// The bound itself is allowed.
	if _, err := Parse([]byte("request:\n  deadline_s: 31536000\n"+minimal), noEnv); err != nil {
		t.Fatal(err)
	}
}
