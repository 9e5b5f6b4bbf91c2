package config

import (
	"fmt"
	"os"
	"path/filepath"
	"reflect"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/narwhal-router/narwhal/cluster/certs"
)

func noEnv(string) (string, bool) { return "", false }

const minimal = `
engines:
  - {name: p0, url: "http://127.0.0.1:8100", role: prefill}
  - {name: d0, url: "http://127.0.0.1:8200", role: decode}
`

func TestMinimalFileKeepsDocumentedDefaults(t *testing.T) {
	cfg, err := Parse([]byte(minimal), noEnv)
	if err != nil {
		t.Fatal(err)
	}
	def := Default()
	if !reflect.DeepEqual(cfg.Server, def.Server) || cfg.Engine != def.Engine || cfg.Recovery != def.Recovery || cfg.Log != def.Log {
		t.Fatalf("defaults changed by a file that does not mention them:\n got %+v\nwant %+v", cfg, def)
	}
	if got := cfg.Engines[0].KV.Connector; got != DefaultConnector {
		t.Fatalf("default connector = %q, want nixl", got)
	}
	if got := cfg.Engines[1].KV.TransferModes; len(got) != 1 || got[0] != "pull" {
		t.Fatalf("default transfer modes = %v, want [pull]", got)
	}
	if got := cfg.Engine.FirstTokenTimeoutS.Duration(); got != 60*time.Second {
		t.Fatalf("first token timeout = %v", got)
	}
}

func TestPartialSectionKeepsItsOtherDefaults(t *testing.T) {
	cfg, err := Parse([]byte("log: {level: debug}\nrecovery: {max_attempts: 3}\n"+minimal), noEnv)
	if err != nil {
		t.Fatal(err)
	}
	if !cfg.Log.AccessLog || cfg.Log.Format != "json" || cfg.Log.Level != "debug" {
		t.Fatalf("log = %+v", cfg.Log)
	}
	if cfg.Recovery.MaxAttempts != 3 || cfg.Recovery.EjectAfter != 3 || cfg.Recovery.RetryBudget.Ratio != 0.1 {
		t.Fatalf("recovery = %+v", cfg.Recovery)
	}
}

func TestSpecSketchParses(t *testing.T) {
	const sketch = `
server: {listen: ":8000", admin_listen: "127.0.0.1:8001", admin_token: "${NARWHAL_ADMIN_TOKEN}", max_body_bytes: 8388608,
         expose_routing_headers: false, shutdown_grace_s: 30}
request: {deadline_s: 600}
admission: {max_queue: 10000, queue_timeout_s: 5}
engine: {prefill_timeout_s: 60, first_token_timeout_s: 60, decode_read_timeout_s: 30}
handoff: {max_age_s: 30, on_missing: recompute}
recovery: {max_attempts: 1, retry_budget: {ratio: 0.1, min_per_s: 5}, eject_after: 3,
           failure_quarantine_s: 0, probe_interval_s: 5, probe_max_interval_s: 60}
engine_contract: {model: "Qwen/Qwen3-0.6B", version: "0.14.1", connector: nixl}
engines:
  - {name: p0, url: "http://10.0.0.11:8000", role: prefill, max_inflight: 64,
     models: ["Qwen/Qwen3-0.6B"], api_key: "${ENGINE_P0_KEY}",
     kv: {connector: nixl, engine_id: "p0-uuid", endpoint: "10.0.0.11:5600"}}
  - {name: d0, url: "http://10.0.0.21:8000", role: decode, max_inflight: 256,
     kv: {connector: nixl}}
metrics: {statsd: {address: "127.0.0.1:8125", prefix: narwhal, flush_interval_s: 1}}
log: {level: info, format: json, access_log: true}
`
	env := map[string]string{"NARWHAL_ADMIN_TOKEN": "s3cret", "ENGINE_P0_KEY": "k0"}
	cfg, err := Parse([]byte(sketch), func(k string) (string, bool) { v, ok := env[k]; return v, ok })
	if err != nil {
		t.Fatal(err)
	}
	if cfg.Server.AdminToken != "s3cret" || cfg.Engines[0].APIKey != "k0" {
		t.Fatalf("env not expanded: token=%q key=%q", cfg.Server.AdminToken, cfg.Engines[0].APIKey)
	}
	if cfg.EngineContract == nil || cfg.EngineContract.Version != "0.14.1" {
		t.Fatalf("engine_contract = %+v", cfg.EngineContract)
	}
	if cfg.Engines[0].KV.Endpoint != "10.0.0.11:5600" || cfg.Metrics.Statsd.Prefix != "narwhal" {
		t.Fatalf("cfg = %+v", cfg)
	}
}

func TestEnvExpansionKeepsNumbersNumbers(t *testing.T) {
	cfg, err := Parse([]byte("request:\n  deadline_s: ${DL}\n"+minimal), func(string) (string, bool) { return "12.5", true })
	if err != nil {
		t.Fatal(err)
	}
	if cfg.Request.DeadlineS != 12.5 {
		t.Fatalf("deadline = %v", cfg.Request.DeadlineS)
	}
}

func TestRejections(t *testing.T) {
	cases := []struct {
		name string
		yaml string
		want []string // every fragment must appear in the error
	}{
		{"unknown top-level key names key and line", "servr: {}\n" + minimal,
			[]string{`line 1: unknown key "servr" at the top level`, "server"}},
		{"unknown nested key lists known keys", "server:\n  listen: \":1\"\n  lissen: \":2\"\n" + minimal,
			[]string{`line 3: unknown key "lissen" under server`, "admin_listen"}},
		{"unknown key inside an engine", "engines:\n  - {name: p0, url: \"http://a:1\", role: both, wieght: 2}\n",
			[]string{`unknown key "wieght" under engines[0]`}},
		{"duplicate key", "log: {level: info, level: debug}\n" + minimal, []string{`key "level" appears twice under log`}},
		{"unset env var names line and key", "server: {admin_token: \"${NOPE}\"}\n" + minimal,
			[]string{"line 1: server.admin_token: environment variable NOPE is not set"}},
		{"every unset env var", "server:\n  admin_token: \"${NOPE}-${NADA}\"\nengines:\n  - {name: p0, url: \"${URL}\", role: both}\n",
			[]string{"line 2: server.admin_token: environment variable NOPE, NADA is not set",
				"line 4: engines[0].url: environment variable URL is not set"}},
		{"a word for seconds", "request: {deadline_s: soon}\n" + minimal,
			[]string{`line 1: request.deadline_s: "soon" is not allowed; want a number of seconds`}},
		{"a duration with a unit", "request:\n  deadline_s: 120s\n" + minimal,
			[]string{`line 2: request.deadline_s: "120s" is not allowed; want a number of seconds (durations are plain numbers of seconds`, "no units"}},
		{"a size with a unit", "server:\n  max_body_bytes: 1MB\n" + minimal,
			[]string{`line 2: server.max_body_bytes: "1MB" is not allowed; want a whole number`}},
		{"a word for a bool", "log: {access_log: sometimes}\n" + minimal,
			[]string{`line 1: log.access_log: "sometimes" is not allowed; want true or false`}},
		{"a mapping for a scalar", "server:\n  listen: {port: 1}\n" + minimal,
			[]string{"line 2: server.listen: a mapping is not allowed here; want a string"}},
		{"a scalar for a section", "server: yes\n" + minimal,
			[]string{`line 1: server: "yes" is not allowed here; want a mapping with the keys admin_idle_timeout_s, admin_listen`}},
		{"a scalar for a list", "engines: p0\n",
			[]string{`line 1: engines: "p0" is not allowed here; want a list`}},
		{"a wrong type in an engine", "engines:\n  - {name: p0, url: \"http://a:1\", role: both, max_inflight: many}\n",
			[]string{`line 2: engines[0].max_inflight: "many" is not allowed; want a whole number`}},
		{"every unknown key and wrong type at once", "servr: {}\nlog: {levl: info}\nrequest: {deadline_s: 1m}\n" + minimal,
			[]string{`line 1: unknown key "servr" at the top level`, `line 2: unknown key "levl" under log`,
				`line 3: request.deadline_s: "1m" is not allowed`}},
		{"wrong types and bad values reported together, by line", "server:\n  max_body_bytes: 1MB\n  listen: \":99999\"\n" + minimal,
			[]string{"line 2: server.max_body_bytes: \"1MB\" is not allowed; want a whole number (no units: 8388608, not 8MB)\nline 3: server.listen: \":99999\" has port 99999"}},
		{"listen port out of range", "server: {listen: \"127.0.0.1:99999\"}\n" + minimal,
			[]string{`line 1: server.listen: "127.0.0.1:99999" has port 99999; want a port from 0 (any free port) to 65535`}},
		{"listen port not a number", "server: {admin_listen: \"127.0.0.1:http\"}\n" + minimal,
			[]string{`server.admin_listen: "127.0.0.1:http" has port "http"; want a port from 0 (any free port) to 65535`}},
		{"engine URL port out of range", "engines:\n  - {name: a, url: \"http://10.0.0.1:81000\", role: both}\n",
			[]string{`line 2: engines[0].url: "http://10.0.0.1:81000" has port 81000; want a port from 1 to 65535`}},
		{"engine URL port zero", "engines:\n  - {name: a, url: \"http://10.0.0.1:0\", role: both}\n",
			[]string{`engines[0].url: "http://10.0.0.1:0" has port 0`}},
		{"kv endpoint port out of range", "engines:\n  - {name: a, url: \"http://a:1\", role: both, kv: {endpoint: \"10.0.0.1:70000\"}}\n",
			[]string{`engines[0].kv.endpoint: "10.0.0.1:70000" has port 70000`}},
		{"statsd port out of range", "metrics: {statsd: {address: \"127.0.0.1:65536\", flush_interval_s: 1}}\n" + minimal,
			[]string{`metrics.statsd.address: "127.0.0.1:65536" has port 65536`}},
		{"flush interval zero", "log: {access_log_flush_s: 0}\n" + minimal,
			[]string{"log.access_log_flush_s: must be a number of seconds greater than 0 and at most 10"}},
		{"bad role lists roles", "engines:\n  - {name: p0, url: \"http://a:1\", role: decoder}\n",
			[]string{`line 2: engines[0].role: "decoder" is not allowed (allowed: prefill, decode, both)`}},
		{"no decode engine", "engines:\n  - {name: p0, url: \"http://a:1\", role: prefill}\n",
			[]string{"no engine can run the decode leg"}},
		{"no engines", "log: {level: info}\n", []string{"engines: lists no engine"}},
		{"duplicate names", "engines:\n  - {name: a, url: \"http://a:1\", role: both}\n  - {name: a, url: \"http://b:1\", role: both}\n",
			[]string{`"a" is already the name of engines[0]`}},
		{"url with path", "engines:\n  - {name: a, url: \"http://a:1/v1\", role: both}\n", []string{"not an engine base URL"}},
		{"bad on_missing", "handoff: {on_missing: retry}\n" + minimal, []string{`"retry" is not allowed (allowed: recompute, fail)`}},
		{"negative timeout", "engine: {first_token_timeout_s: -1}\n" + minimal, []string{"engine.first_token_timeout_s", "greater than 0"}},
		{"max interval below interval", "recovery: {probe_interval_s: 10, probe_max_interval_s: 5}\n" + minimal,
			[]string{"recovery.probe_max_interval_s", "at least recovery.probe_interval_s"}},
		{"bad transfer mode", "engines:\n  - {name: a, url: \"http://a:1\", role: both, kv: {transfer_modes: [pul]}}\n",
			[]string{`engines[0].kv.transfer_modes[0]: "pul" is not allowed (allowed: pull, push)`}},
		{"several problems reported together", "log: {level: loud, format: xml}\n" + minimal,
			[]string{"log.level", "log.format"}},
		{"empty contract", "engine_contract: {}\n" + minimal, []string{"engine_contract: pins nothing"}},
		{"bad listen", "server: {listen: \"8000\"}\n" + minimal, []string{"server.listen", "host:port"}},
		{"procs a word", "server:\n  procs: most\n" + minimal,
			[]string{`line 2: server.procs: "most" is not allowed; want "all", "auto" or a CPU count from 1 to 1024`}},
		{"procs zero", "server: {procs: 0}\n" + minimal, []string{`server.procs: "0" is not allowed`}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			_, err := Parse([]byte(tc.yaml), noEnv)
			if err == nil {
				t.Fatal("accepted")
			}
			for _, w := range tc.want {
				if !strings.Contains(err.Error(), w) {
					t.Errorf("error %q does not contain %q", err, w)
				}
			}
		})
	}
}

func TestExampleConfigParses(t *testing.T) {
	cfg, err := Load("../docs/narwhal.example.yaml")
	if err == nil || !strings.Contains(err.Error(), "NARWHAL_ADMIN_TOKEN is not set") {
		t.Fatalf("without the token variable: %v", err)
	}
	t.Setenv("NARWHAL_ADMIN_TOKEN", "t")
	t.Setenv("ENGINE_P0_KEY", "k")
	t.Setenv("NARWHAL_API_KEY", "client-key")
	t.Setenv("NARWHAL_SEARCH_API_KEY", "search-key")
	keys := filepath.Join(t.TempDir(), "keys")
	if err := os.WriteFile(keys, []byte("file-key\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	t.Setenv("NARWHAL_API_KEYS_FILE", keys)
	files, err := certs.Write(t.TempDir(), []string{"router-a"}, nil)
	if err != nil {
		t.Fatal(err)
	}
	t.Setenv("NARWHAL_CLUSTER_CERT", files["router-a"].Cert)
	t.Setenv("NARWHAL_CLUSTER_KEY", files["router-a"].Key)
	t.Setenv("NARWHAL_CLUSTER_CA", files["router-a"].CA)
	if cfg, err = Load("../docs/narwhal.example.yaml"); err != nil {
		t.Fatal(err)
	}
	if len(cfg.Server.APIKeys) != 1 || cfg.Server.APIKeys[0] != "client-key" {
		t.Fatalf("server.api_keys: %d keys", len(cfg.Server.APIKeys))
	}
	if len(cfg.Engines) != 2 || cfg.Server.AdminToken != "t" || cfg.Engines[0].APIKey != "k" || cfg.Recovery.MaxAttempts != 2 {
		t.Fatalf("%+v", cfg)
	}
}

func TestAPIKeyValidationNamesThePositionNotTheKey(t *testing.T) {
	dir := t.TempDir()
	file := dir + "/keys"
	if err := os.WriteFile(file, []byte("# comment\nfile-key-1\n\nfile-key-2\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	_, err := Parse([]byte("server:\n  api_keys: [\"secret-one\", \"secret-one\", \"\"]\n  api_key_max_concurrency: -1\n"+minimal), noEnv)
	if err == nil {
		t.Fatal("bad keys accepted")
	}
	for _, want := range []string{"line 2: server.api_keys[1]: repeats server.api_keys[0]", "server.api_keys[2]: is empty",
		"line 3: server.api_key_max_concurrency: must be 0 (unbounded) or a number of requests, got -1"} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("missing %q in:\n%v", want, err)
		}
	}
	if strings.Contains(err.Error(), "secret-one") {
		t.Errorf("a key value is in the error: %v", err)
	}
	cfg, err := Parse([]byte("server: {api_keys: [k0], api_keys_file: "+strconv.Quote(file)+"}\n"+minimal), noEnv)
	if err != nil {
		t.Fatal(err)
	}
	keys, err := cfg.Server.ClientAPIKeys()
	if err != nil || strings.Join(keys, ",") != "k0,file-key-1,file-key-2" {
		t.Fatalf("keys %v, %v", keys, err)
	}
	if _, err := Parse([]byte("server: {api_keys_file: "+strconv.Quote(dir+"/missing")+"}\n"+minimal), noEnv); err == nil ||
		!strings.Contains(err.Error(), "server.api_keys_file") {
		t.Fatalf("missing file: %v", err)
	}
}

func TestProcsIsAllAutoOrACount(t *testing.T) {
	for _, c := range []struct {
		yaml  string
		fixed int
		auto  bool
	}{{"", 0, false}, {"server: {procs: all}\n", 0, false}, {"server: {procs: auto}\n", 0, true}, {"server: {procs: 3}\n", 3, false}} {
		cfg, err := Parse([]byte(c.yaml+minimal), noEnv)
		if err != nil {
			t.Fatalf("%q: %v", c.yaml, err)
		}
		if n, auto, err := cfg.Server.ProcsPolicy(); err != nil || n != c.fixed || auto != c.auto {
			t.Errorf("%q: ProcsPolicy %d, %v, %v; want %d, %v", c.yaml, n, auto, err, c.fixed, c.auto)
		}
	}
}

// A fraction where a whole number is wanted is refused, as a word is: the YAML decoder would
// truncate it (max_inflight: 1.5 would run as 1). A whole number written as a float is kept.
func TestFractionWhereAWholeNumberIsWanted(t *testing.T) {
	for _, tc := range []struct{ yaml, want string }{
		{"engines:\n  - {name: p0, url: \"http://a:1\", role: both, max_inflight: 1.5}\n",
			`line 2: engines[0].max_inflight: "1.5" is not allowed; want a whole number (no units: 8388608, not 8MB)`},
		{"server:\n  max_body_bytes: 1048576.5\n" + minimal, `line 2: server.max_body_bytes: "1048576.5" is not allowed; want a whole number`},
		{"recovery: {max_attempts: 2.5}\n" + minimal, `line 1: recovery.max_attempts: "2.5" is not allowed; want a whole number`},
		{"admission: {max_queue: -0.5}\n" + minimal, `line 1: admission.max_queue: "-0.5" is not allowed; want a whole number`},
		{"admission: {max_queue: .nan}\n" + minimal, `line 1: admission.max_queue: ".nan" is not allowed; want a whole number`},
		{"admission:\n  max_queue: ${Q}\n" + minimal, `line 2: admission.max_queue: "7.25" is not allowed; want a whole number`},
	} {
		_, err := Parse([]byte(tc.yaml), func(string) (string, bool) { return "7.25", true })
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%q: %v, want %q", tc.yaml, err, tc.want)
		}
	}
	cfg, err := Parse([]byte("recovery: {max_attempts: 3.0}\nadmission: {max_queue: 1e3}\n"+minimal), noEnv)
	if err != nil {
		t.Fatal(err)
	}
	if cfg.Recovery.MaxAttempts != 3 || cfg.Admission.MaxQueue != 1000 {
		t.Fatalf("max_attempts %d, max_queue %d", cfg.Recovery.MaxAttempts, cfg.Admission.MaxQueue)
	}
	// Seconds keep their fractions.
	if cfg, err := Parse([]byte("request: {deadline_s: 1.5}\n"+minimal), noEnv); err != nil || cfg.Request.DeadlineS != 1.5 {
		t.Fatalf("deadline_s 1.5: %v, %v", cfg.Request.DeadlineS, err)
	}
}

// Two listeners on one port whose addresses overlap are refused naming both keys: serve would
// fail on the second with "address already in use".
func TestCollidingListeners(t *testing.T) {
	const clusterOn = "cluster: {enabled: true, bind: \"%s\", advertise: \"10.0.0.1:7946\"}\n"
	for _, tc := range []struct{ yaml, want string }{
		{"server:\n  listen: \"127.0.0.1:8000\"\n  admin_listen: \"127.0.0.1:8000\"\n" + minimal,
			`line 3: server.admin_listen: "127.0.0.1:8000" takes the port of server.listen ("127.0.0.1:8000", line 2); give each listener a port of its own`},
		{"server: {admin_listen: \"127.0.0.1:8000\"}\n" + minimal, // listen defaults to ":8000", every address
			`line 1: server.admin_listen: "127.0.0.1:8000" takes the port of server.listen (":8000", its default)`},
		{"server: {listen: \"0.0.0.0:9000\", admin_listen: \"[::1]:9000\"}\n" + minimal, `server.admin_listen: "[::1]:9000" takes the port of server.listen`},
		{"server: {listen: \"[::]:9000\", admin_listen: \"10.1.2.3:9000\"}\n" + minimal, `server.admin_listen: "10.1.2.3:9000" takes the port`},
		{"server: {listen: \"localhost:9000\", admin_listen: \"[::ffff:127.0.0.1]:9000\"}\n" + minimal, `server.admin_listen: "[::ffff:127.0.0.1]:9000" takes the port`},
		{"server: {listen: \"api.internal:9000\", admin_listen: \"API.internal:9000\"}\n" + minimal, `server.admin_listen: "API.internal:9000" takes the port`},
		{fmt.Sprintf(clusterOn, ":8001") + minimal, `line 1: cluster.bind: ":8001" takes the port of server.admin_listen ("127.0.0.1:8001", its default)`},
		{fmt.Sprintf(clusterOn, "10.0.0.1:8000") + minimal, `cluster.bind: "10.0.0.1:8000" takes the port of server.listen`},
	} {
		_, err := Parse([]byte(tc.yaml), noEnv)
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%q: %v\nwant %q", tc.yaml, err, tc.want)
		}
	}
	for _, ok := range []string{
		"server: {listen: \"127.0.0.1:8000\", admin_listen: \"127.0.0.2:8000\"}\n", // distinct addresses
		"server: {listen: \"127.0.0.1:0\", admin_listen: \"127.0.0.1:0\"}\n",       // any free port, twice
		"server: {listen: \"a.internal:9000\", admin_listen: \"b.internal:9000\"}\n",
		"server: {listen: \":8000\", admin_listen: \"\"}\n",     // no admin listener
		"cluster: {enabled: false, bind: \"127.0.0.1:8000\"}\n", // the cluster is off: its port is not opened
		"cluster: {enabled: true, bind: \"127.0.0.1:7946\"}\n",  // a port of its own (on loopback: no TLS needed)
	} {
		if _, err := Parse([]byte(ok+minimal), noEnv); err != nil {
			t.Errorf("%q refused: %v", ok, err)
		}
	}
}

func TestFlowControlProblemsNameTheirKey(t *testing.T) {
	_, err := Parse([]byte(`flow_control:
  bands: [{name: gold}, {name: gold}, {name: "bad name"}]
  default_band: silver
  unlisted_weight: 0
  tenants:
    - {name: a, api_keys: [k1], weight: -1, band: bronze}
    - {name: a, api_keys: [k1], bands: [gold, lead]}
`+minimal), noEnv)
	if err == nil {
		t.Fatal("accepted")
	}
	for _, want := range []string{
		`line 2: flow_control.bands[1].name: repeats band "gold"; name each band once`,
		`line 2: flow_control.bands[2].name: may hold only letters`,
		`line 3: flow_control.default_band: names band "silver", which flow_control.bands does not define (bands: gold, gold, bad name)`,
		`line 4: flow_control.unlisted_weight: must be greater than 0`,
		`line 6: flow_control.tenants[0].weight: must be greater than 0`,
		`line 6: flow_control.tenants[0].band: names band "bronze"`,
		`line 7: flow_control.tenants[1].name: repeats tenant "a"; name each tenant once`,
		`line 7: flow_control.tenants[1].api_keys[0]: is already a key of flow_control.tenants[0]`,
		`line 7: flow_control.tenants[1].bands[1]: names band "lead"`,
	} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("missing %q in:\n%v", want, err)
		}
	}
}
