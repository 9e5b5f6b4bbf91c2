package config

import (
	"strings"
	"testing"
)

const discoveryOnly = `
discovery:
  kubernetes:
    namespace: llm
    roles:
      - {role: prefill, selector: "app=vllm,role=prefill", port: http}
      - role: decode
        selector: "app=vllm,role in (decode)"
        template: {max_inflight: 8, kv: {allowed_endpoints: ["10.244.0.0/16"]}}
  dns:
    - {name: vllm-decode.llm.svc.cluster.local, role: decode, port: 8000}
    - {name: _http._tcp.vllm.service.consul., type: srv, role: both, resolver: "127.0.0.1:8600", interval_s: 1}
    - {name: other.example, role: decode, port: 8000, resolver: 10.0.0.10}
  etcd: {endpoints: ["http://127.0.0.1:2379"]}
`

// With a discovery source the engines list may be empty; every default is documented and
// filled. (What each source derives from its section, it tests: transport/discovery/...)
func TestDiscoveryDefaults(t *testing.T) {
	cfg, err := Parse([]byte(discoveryOnly), noEnv)
	if err != nil {
		t.Fatal(err)
	}
	if err := cfg.Validate(builtin); err != nil {
		t.Fatal(err)
	}
	d := cfg.Discovery
	if d.RetryInitialS != 0.5 || d.RetryMaxS != 30 || len(cfg.Engines) != 0 {
		t.Errorf("retry %v..%v, engines %v", d.RetryInitialS, d.RetryMaxS, cfg.Engines)
	}
	t.Run("kubernetes", func(t *testing.T) { checkKubernetesDefaults(t, d.Kubernetes) })
	t.Run("dns", func(t *testing.T) { checkDNSDefaults(t, d.DNS) })
	if e := d.Etcd; e == nil || e.Prefix != DefaultEtcdEnginePrefix || e.DialTimeoutS != 5 || e.RequestTimeoutS != 5 || e.CheckIntervalS != 5 {
		t.Errorf("etcd %+v", e)
	}
	// Off unless configured.
	if d := Default().Discovery; d.Kubernetes != nil || d.DNS != nil || d.Etcd != nil {
		t.Fatalf("a configuration without discovery runs a source: %+v", d)
	}
}

func checkKubernetesDefaults(t *testing.T, k *KubernetesDiscovery) {
	if k == nil || k.Namespace != "llm" || k.Annotations.EngineID != DefaultEngineIDAnnotation || k.Annotations.Endpoint != DefaultEndpointAnnotation || len(k.Roles) != 2 {
		t.Fatalf("kubernetes %+v", k)
	}
	if r := k.Roles[0]; r.Role != RolePrefill || r.Port != "http" || r.Scheme != "http" || r.Template.Engine().KV.Connector != DefaultConnector {
		t.Errorf("prefill role %+v", r)
	}
	if r := k.Roles[1]; r.Port != "8000" || r.Template.MaxInflight != 8 {
		t.Errorf("decode role %+v", r)
	}
	if e := k.Roles[1].Template.Engine(); e.MaxInflight != 8 || e.KV.AllowedEndpoints[0] != "10.244.0.0/16" || e.KV.TransferModes[0] != "pull" {
		t.Errorf("decode template %+v", e)
	}
}

func checkDNSDefaults(t *testing.T, names []DNSDiscovery) {
	if len(names) != 3 {
		t.Fatalf("dns %+v", names)
	}
	if n := names[0]; n.Type != DNSTypeA || n.IntervalS != 5 || n.TimeoutS != 2 || n.Resolver != "" || n.Prefix() != "vllm-decode" || n.Scheme != "http" {
		t.Errorf("dns[0] %+v", n)
	}
	if n := names[1]; n.Port != 0 || n.Prefix() != "vllm" || n.IntervalS != 1 {
		t.Errorf("dns[1] %+v", n)
	}
	if n := names[2]; n.Prefix() != "other" {
		t.Errorf("dns[2] %+v", n)
	}
}

func TestDiscoveryRefusesBadValuesByName(t *testing.T) {
	for _, tc := range []struct{ name, yaml, want string }{
		{"no engines anywhere", "log: {level: info}\n", "engines: lists no engine; add at least one prefill-capable and one decode-capable engine, or configure a discovery source"},
		{"no prefill anywhere", "discovery: {dns: [{name: d.example, role: decode, port: 80}]}\n",
			"engines: no engine can run the prefill leg; give at least one the role prefill or both (in the list or in a discovery source)"},
		{"empty selector", "discovery: {kubernetes: {roles: [{role: both, selector: \"\"}]}}\n", "line 1: discovery.kubernetes.roles[0].selector: must not be empty"},
		{"bad selector", "discovery: {kubernetes: {roles: [{role: both, selector: \"role in (a\"}]}}\n", `discovery.kubernetes.roles[0].selector: "role in (a" is not a label selector`},
		{"no roles", "discovery: {kubernetes: {namespace: llm}}\n" + minimal, "discovery.kubernetes.roles: selects no pods"},
		{"bad role", "discovery: {kubernetes: {roles: [{role: decoder, selector: a=b}]}}\n" + minimal, `discovery.kubernetes.roles[0].role: "decoder" is not allowed (allowed: prefill, decode, both)`},
		{"bad port number", "discovery: {kubernetes: {roles: [{role: both, selector: a=b, port: 70000}]}}\n", `discovery.kubernetes.roles[0].port: 70000 is not allowed; want a port from 1 to 65535 or a container port name`},
		{"bad port name", "discovery: {kubernetes: {roles: [{role: both, selector: a=b, port: Http_Port}]}}\n", `discovery.kubernetes.roles[0].port: "Http_Port" is not allowed`},
		{"zero port", "discovery: {kubernetes: {roles: [{role: both, selector: a=b, port: \"\"}]}}\n", `discovery.kubernetes.roles[0].port: "" is not allowed`},
		{"bad namespace", "discovery: {kubernetes: {namespace: LLM, roles: [{role: both, selector: a=b}]}}\n", `discovery.kubernetes.namespace: "LLM" is not a namespace name`},
		{"bad annotation", "discovery: {kubernetes: {annotations: {kv_endpoint: \"a b\"}, roles: [{role: both, selector: a=b}]}}\n", `discovery.kubernetes.annotations.kv_endpoint: "a b" is not an annotation name`},
		{"bad template", "discovery: {kubernetes: {roles: [{role: both, selector: a=b, template: {kv: {transfer_modes: [pul]}}}]}}\n", `discovery.kubernetes.roles[0].template.kv.transfer_modes[0]: "pul" is not allowed`},
		{"unknown template key", "discovery: {kubernetes: {roles: [{role: both, selector: a=b, template: {url: x}}]}}\n", `unknown key "url" under discovery.kubernetes.roles[0].template`},
		{"pool and port", "discovery: {kubernetes: {roles: [{role: both, inference_pool: qwen, port: 8000}]}}\n", "discovery.kubernetes.roles[0].port: must not be set with inference_pool"},
		{"bad pool name", "discovery: {kubernetes: {roles: [{role: both, inference_pool: Qwen}]}}\n", `discovery.kubernetes.roles[0].inference_pool: "Qwen" is not an InferencePool name`},
		{"bad selector within a pool", "discovery: {kubernetes: {roles: [{role: both, inference_pool: qwen, selector: \"a in (b\"}]}}\n", `discovery.kubernetes.roles[0].selector: "a in (b" is not a label selector`},
		{"zero watch timeout", "discovery: {kubernetes: {watch_timeout_s: 0, roles: [{role: both, selector: a=b}]}}\n", "discovery.kubernetes.watch_timeout_s: 0 is not allowed; want a number of seconds from 1 to 3600"},
		{"dns without port", "discovery: {dns: [{name: d.example, role: both}]}\n", "discovery.dns[0].port: 0 is not allowed; want the engines' port, from 1 to 65535 (required with type a)"},
		{"srv with port", "discovery: {dns: [{name: d.example, type: srv, role: both, port: 80}]}\n", "discovery.dns[0].port: must not be set with type srv"},
		{"bad type", "discovery: {dns: [{name: d.example, type: cname, role: both, port: 80}]}\n", `discovery.dns[0].type: "cname" is not allowed (allowed: a, aaaa, srv)`},
		{"bad name", "discovery: {dns: [{name: \"d..example\", role: both, port: 80}]}\n", `discovery.dns[0].name: "d..example" is not a DNS name`},
		{"zero interval", "discovery: {dns: [{name: d.example, role: both, port: 80, interval_s: 0}]}\n", "line 1: discovery.dns[0].interval_s: 0 is not allowed; want a number of seconds from 0.05 to 3600"},
		{"long timeout", "discovery: {dns: [{name: d.example, role: both, port: 80, timeout_s: 61}]}\n", "discovery.dns[0].timeout_s: 61 is not allowed; want a number of seconds greater than 0 and at most 60"},
		{"bad resolver", "discovery: {dns: [{name: d.example, role: both, port: 80, resolver: \"dns:x\"}]}\n", `discovery.dns[0].resolver: "dns:x" has port "x"`},
		{"shared prefix", "discovery: {dns: [{name: d.a.example, role: both, port: 80}, {name: d.b.example, role: both, port: 80}]}\n",
			`discovery.dns[1].engine_prefix: "d" is also the engine prefix of discovery.dns[0]; engine names would collide`},
		{"bad prefix", "discovery: {dns: [{name: d.example, role: both, port: 80, engine_prefix: \"a.b\"}]}\n", `discovery.dns[0].engine_prefix: "a.b" is not allowed`},
		{"etcd without endpoints", "discovery: {etcd: {prefix: /e/}}\n", "discovery.etcd.endpoints: must list at least one etcd client URL"},
		{"etcd https", "discovery: {etcd: {endpoints: [\"https://e:2379\"]}}\n", `discovery.etcd.endpoints[0]: "https://e:2379" is not allowed; write an etcd client URL http://host:port (https is not supported`},
		{"etcd bad prefix", "discovery: {etcd: {endpoints: [\"http://e:2379\"], prefix: engines}}\n", `discovery.etcd.prefix: "engines" is not allowed; want a key prefix starting with '/'`},
		{"etcd zero timeout", "discovery: {etcd: {endpoints: [\"http://e:2379\"], request_timeout_s: 0}}\n", "discovery.etcd.request_timeout_s: 0 is not allowed"},
		{"retry bounds", "discovery: {retry_initial_s: 2, retry_max_s: 1}\n" + minimal, "discovery.retry_max_s: 1 is not allowed; want a number of seconds from discovery.retry_initial_s (2) to 3600"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := Parse([]byte(tc.yaml), noEnv)
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("error %v, want it to contain %q", err, tc.want)
			}
		})
	}
}

// A role read from an InferencePool needs no selector and takes no port: the pool gives both.
func TestDiscoveryOfAnInferencePool(t *testing.T) {
	cfg, err := Parse([]byte("discovery: {kubernetes: {roles: [{role: both, inference_pool: qwen}]}}\n"), noEnv)
	if err != nil {
		t.Fatal(err)
	}
	k := cfg.Discovery.Kubernetes
	if r := k.Roles[0]; r.InferencePool != "qwen" || r.Port != "" || r.Selector != "" || r.Scheme != "http" || k.WatchTimeoutS != 60 {
		t.Fatalf("kubernetes %+v", k)
	}
}

// An engine from elsewhere than the file is checked as the file's are.
func TestCheckEngine(t *testing.T) {
	if err := CheckEngine(Engine{Name: "d1", URL: "http://10.0.0.1:8000", Role: RoleDecode}, nil); err != nil {
		t.Fatal(err)
	}
	err := CheckEngine(Engine{Name: "-d", URL: "http://10.0.0.1:8000/v1", Role: "x", MaxInflight: -1, KV: KV{Endpoint: "x", Connector: "tcp"}}, builtin)
	for _, want := range []string{`name: "-d" is not a usable name`, `url: "http://10.0.0.1:8000/v1" is not an engine base URL`,
		`role: "x" is not allowed`, "max_inflight: must be 0 (no cap) or more", `kv.endpoint: "x" is not an address`,
		`kv.connector: "tcp" is not allowed (allowed: nixl)`} {
		if err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("CheckEngine: %v, want %q", err, want)
		}
	}
}

func TestDNSEnginePrefix(t *testing.T) {
	for name, want := range map[string]string{
		"vllm-decode.llm.svc.cluster.local.":           "vllm-decode",
		"_http._tcp.vllm.service.consul":               "vllm",
		"a-very-long-first-label-that-goes-on.example": "a-very-long-first-label",
		"_x._y.": "dns",
	} {
		if got := DNSEnginePrefix(name); got != want {
			t.Errorf("DNSEnginePrefix(%q) = %q, want %q", name, got, want)
		}
	}
}
