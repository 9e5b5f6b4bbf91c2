package config

import (
	"net/url"
	"strings"
	"testing"
)

// placement.kv_events and engines[].kv_events: endpoints are ZeroMQ TCP endpoints (a pattern
// may name {host}), every mistake named with its key and line.
func TestKVEventsEndpointsAreCheckedAndResolved(t *testing.T) {
	bad := []struct{ yaml, want string }{
		{"placement: {kv_events: {endpoint: \"http://{host}:5557\"}}\n", `line 1: placement.kv_events.endpoint: "http://{host}:5557" is not a ZeroMQ TCP endpoint; write tcp://{host}:port`},
		{"placement: {kv_events: {endpoint: \"tcp://*:5557\"}}\n", `placement.kv_events.endpoint: "tcp://*:5557" is not a ZeroMQ TCP endpoint`},
		{"placement: {kv_events: {endpoint: \"tcp://{host}:99999\"}}\n", `placement.kv_events.endpoint: "tcp://{host}:99999": port "99999" is not a port from 1 to 65535`},
		{"placement: {kv_events: {replay_endpoint: \"tcp://{host}:5558\"}}\n", "placement.kv_events.replay_endpoint: is set but placement.kv_events.endpoint is not"},
		{"placement: {kv_events: {max_blocks: 0}}\n", "placement.kv_events.max_blocks: must be 1 or more"},
		{"placement: {kv_events: {reconnect_s: 0}}\n", "placement.kv_events.reconnect_s"},
	}
	for _, c := range bad {
		_, err := Parse([]byte(c.yaml+minimal), noEnv)
		if err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%q: got %v, want %q", c.yaml, err, c.want)
		}
	}
	engineBad := []struct{ kvEvents, want string }{
		{`{endpoint: "tcp://{host}:5557"}`, `engines[0].kv_events.endpoint: "tcp://{host}:5557" is not a ZeroMQ TCP endpoint; write tcp://host:port`},
		{`{endpoint: "off", replay_endpoint: "tcp://a:1"}`, `engines[0].kv_events.replay_endpoint: is set but kv_events.endpoint is "off"`},
	}
	for _, c := range engineBad {
		doc := "engines:\n  - {name: p0, url: \"http://10.0.0.1:8000\", role: both, kv_events: " + c.kvEvents + "}\n"
		_, err := Parse([]byte(doc), noEnv)
		if err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%s: got %v, want %q", c.kvEvents, err, c.want)
		}
	}

	doc := `placement: {kv_events: {endpoint: "tcp://{host}:5557", replay_endpoint: "tcp://{host}:5558"}}
engines:
  - {name: a, url: "http://10.0.0.1:8000", role: both}
  - {name: b, url: "http://[fd00::2]:8000", role: both}
  - {name: c, url: "http://10.0.0.3:8000", role: both, kv_events: {endpoint: "tcp://10.9.9.9:6000"}}
  - {name: d, url: "http://10.0.0.4:8000", role: both, kv_events: {endpoint: "off"}}
`
	cfg, err := Parse([]byte(doc), noEnv)
	if err != nil {
		t.Fatal(err)
	}
	want := map[string][2]string{
		"a": {"tcp://10.0.0.1:5557", "tcp://10.0.0.1:5558"},
		"b": {"tcp://[fd00::2]:5557", "tcp://[fd00::2]:5558"},
		"c": {"tcp://10.9.9.9:6000", ""}, // its own endpoint, and no replay of its own
		"d": {"", ""},
	}
	for _, e := range cfg.Engines {
		u, err := url.Parse(e.URL)
		if err != nil {
			t.Fatal(err)
		}
		pub, replay := cfg.Placement.KVEvents.Endpoints(e.KVEvents, u.Hostname())
		if w := want[e.Name]; pub != w[0] || replay != w[1] {
			t.Errorf("engine %s: %q %q, want %q %q", e.Name, pub, replay, w[0], w[1])
		}
	}
	if k := cfg.Placement.KVEvents; k.MaxBlocks != 1<<20 || k.ReplayTimeoutS != 2 {
		t.Errorf("defaults: %+v", k)
	}
}
