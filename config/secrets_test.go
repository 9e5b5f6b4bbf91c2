package config

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// A secret that resolves to nothing is a configuration error naming the key, never a silently
// open door (issue 26, item 3): an admin token or engine key from a variable that is set but
// empty, an explicit "", an API key file without a key.
func TestEmptySecretsFailClosed(t *testing.T) {
	empty := func(name string) (string, bool) { return "", name == "NW_TOK" }
	dir := t.TempDir()
	blank := filepath.Join(dir, "keys")
	if err := os.WriteFile(blank, []byte("# no keys yet\n\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	cases := []struct{ name, yaml, want string }{
		{"admin token from an empty variable", "server:\n  admin_token: \"${NW_TOK}\"\n" + minimal, "line 2: server.admin_token: is empty"},
		{"admin token written empty", "server:\n  admin_token: \"\"\n" + minimal, "line 2: server.admin_token: is empty"},
		{"admin token of spaces", "server:\n  admin_token: \"  \"\n" + minimal, "server.admin_token: is only whitespace"},
		{"admin token with a newline", "server:\n  admin_token: \"tok\\n\"\n" + minimal, "server.admin_token: has whitespace around it"},
		{"engine key from an empty variable", "engines:\n  - {name: p0, url: \"http://127.0.0.1:8100\", role: prefill, api_key: \"${NW_TOK}\"}\n  - {name: d0, url: \"http://127.0.0.1:8200\", role: decode}\n",
			"line 2: engines[0].api_key: is empty"},
		{"api key from an empty variable", "server:\n  api_keys: [\"${NW_TOK}\"]\n" + minimal, "server.api_keys[0]: is empty"},
		{"key file named empty", "server:\n  api_keys_file: \"${NW_TOK}\"\n" + minimal, "server.api_keys_file: is empty"},
		{"key file without a key", "server:\n  api_keys_file: " + blank + "\n" + minimal, "holds no key"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			_, err := Parse([]byte(tc.yaml), empty)
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("got %v, want an error containing %q", err, tc.want)
			}
			if strings.Contains(err.Error(), "tok") && !strings.Contains(tc.want, "tok") {
				t.Fatalf("the message shows the secret: %v", err)
			}
		})
	}
	// Leaving the keys out is how to go without them.
	cfg, err := Parse([]byte(minimal), empty)
	if err != nil {
		t.Fatal(err)
	}
	if err := cfg.Validate(builtin); err != nil {
		t.Fatal(err)
	}
}

// engines[].kv.allowed_ports: ports and ranges, never one of the router's own listeners.
func TestAllowedPorts(t *testing.T) {
	doc := func(ports string) string {
		return "server: {listen: \":8000\", admin_listen: \"127.0.0.1:8001\"}\nengines:\n  - {name: p0, url: \"http://10.0.0.5:8100\", role: prefill, kv: {allowed_ports: " + ports + "}}\n  - {name: d0, url: \"http://127.0.0.1:8200\", role: decode}\n"
	}
	for ports, want := range map[string]string{
		`["7000-7010", "7100"]`: "",
		`["5600-9000"]`:         "engines[0].kv.allowed_ports: 5600-9000 includes 8000, the port of server.listen",
		`["8001"]`:              "includes 8001, the port of server.admin_listen",
		`["9-1"]`:               `engines[0].kv.allowed_ports: [0] "9-1" is not allowed; want a port (5600) or a range`,
		`["70000"]`:             "is not allowed",
		`["x"]`:                 "is not allowed",
	} {
		cfg, err := Parse([]byte(doc(ports)), noEnv)
		if want == "" {
			if err != nil {
				t.Fatalf("%s: %v", ports, err)
			}
			ranges, err := ParsePorts(cfg.Engines[0].KV.AllowedPorts)
			if err != nil || len(ranges) != 2 || ranges[0] != (PortRange{Lo: 7000, Hi: 7010}) || ranges[1].String() != "7100" {
				t.Fatalf("%s: parsed %+v, %v", ports, ranges, err)
			}
			if reserved := cfg.ReservedPorts(); len(reserved) != 2 {
				t.Fatalf("reserved ports %v, want the two listeners'", reserved)
			}
			continue
		}
		if err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("%s: got %v, want %q", ports, err, want)
		}
	}
}
