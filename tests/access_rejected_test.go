package tests

import (
	"testing"

	"github.com/narwhal-router/narwhal/config"
)

// Every request gets one access-log line, those ingress answers itself included: a body that
// does not validate, a header that does not parse, a key that is wrong.
func TestRequestsIngressRefusesHaveAnAccessLogLine(t *testing.T) {
	h := start(t, setup{prefill: 1, decode: 1, config: func(c *config.Config) { c.Server.APIKeys = []string{"k"} }})
	for _, tc := range []struct {
		name, body string
		headers    []string
		status     int
		kind       string
	}{
		{"malformed body", `{"model":`, []string{"Authorization", "Bearer k"}, 400, "invalid_request"},
		{"bad deadline header", completion("hi", false), []string{"Authorization", "Bearer k", "X-Narwhal-Deadline-S", "soon"}, 400, "invalid_deadline"},
		{"wrong key", completion("hi", false), []string{"Authorization", "Bearer nope"}, 401, "unauthorized"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			r := h.send("/v1/completions", tc.body, tc.headers...)
			if r.status != tc.status {
				t.Fatalf("status %d, want %d: %s", r.status, tc.status, r.body)
			}
			line := h.accessLine(r.id)
			if num(line["status"]) != float64(tc.status) || str(line["outcome"]) != "rejected" || str(line["error_kind"]) != tc.kind ||
				str(line["endpoint"]) != "completions" {
				t.Fatalf("access line %v, want status %d, outcome rejected, error_kind %s", line, tc.status, tc.kind)
			}
		})
	}
	h.expectLegs(0, 0)
}
