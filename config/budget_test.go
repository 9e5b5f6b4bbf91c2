package config

import "testing"

// server.max_buffered_bytes is 0 (derived from the memory limit, transport/memory) or a byte
// count within its bounds.
func TestBufferBudgetBounds(t *testing.T) {
	for v, ok := range map[string]bool{"0": true, "67108864": true, "1000": false, "-1": false} {
		_, err := Parse([]byte("server: {max_buffered_bytes: "+v+"}\n"+minimal), noEnv)
		if (err == nil) != ok {
			t.Errorf("max_buffered_bytes %s: %v", v, err)
		}
	}
}
