package sim

import (
	"encoding/json"
	"strings"
	"testing"
)

// TestKVHandshakeRefusesIncompatiblePair: a consumer refuses to read from a producer whose
// compatibility hash, block size or tensor parallel size differs from its own, as vLLM's
// NixlConnector does, and answers the decode as a failed KV load (500); the same pair reads
// once the producer's configuration matches (SetKVConfig).
func TestKVHandshakeRefusesIncompatiblePair(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name     string
		producer Options
		want     string
		fix      func(p *Engine)
	}{
		{"cache dtype", Options{CacheDType: "fp8"}, "NIXL compatibility hash mismatch",
			func(p *Engine) { p.SetKVConfig("", "auto") }},
		{"version", Options{Version: "0.99.0"}, "NIXL compatibility hash mismatch",
			func(p *Engine) { p.SetKVConfig(DefaultVersion, "") }},
		{"block size", Options{BlockSize: 32}, "remote block size 32 differs from the local 16", nil},
		{"tensor parallel size", Options{TPSize: 2}, "remote tensor parallel size 2 differs from the local 1", nil},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			tc.producer.Role = RolePrefill
			p := startEngine(t, tc.producer)
			d := startEngine(t, Options{Role: RoleDecode})
			decode := func() (int, string) {
				_, _, body := post(t, p.URL(), "/v1/completions", prefillBody(fortyWords))
				status, _, out := post(t, d.URL(), "/v1/completions",
					withKV(t, `{"model":"sim-model","prompt":"`+fortyWords+`","max_tokens":2}`, descriptorOf(t, body)))
				return status, string(out)
			}
			status, body := decode()
			var env struct{ Error struct{ Message string } }
			_ = json.Unmarshal([]byte(body), &env)
			if status != 500 || !strings.Contains(env.Error.Message, tc.want) {
				t.Fatalf("decode from an incompatible producer: %d %s; want 500 mentioning %q", status, body, tc.want)
			}
			if s := d.Stats(); s.KVLoadFailures != 1 || s.KVLoads != 0 {
				t.Errorf("consumer: %d loads, %d load failures; want 0, 1", s.KVLoads, s.KVLoadFailures)
			}
			if tc.fix == nil {
				return
			}
			tc.fix(p)
			if status, body := decode(); status != 200 {
				t.Fatalf("decode once the producer matches: %d %s", status, body)
			}
			if s := d.Stats(); s.KVLoads != 1 {
				t.Errorf("consumer loads after the fix: %d, want 1", s.KVLoads)
			}
		})
	}
}
