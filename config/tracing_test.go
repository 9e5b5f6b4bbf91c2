package config

import (
	"strings"
	"testing"

	"github.com/narwhal-router/narwhal/transport/kv"
)

func TestTracingIsOffByDefault(t *testing.T) {
	cfg, err := Parse([]byte(minimal), noEnv)
	if err != nil {
		t.Fatal(err)
	}
	rt, err := Provision(cfg, kv.Builtin())
	if err != nil {
		t.Fatal(err)
	}
	if rt.Tracing.Enabled {
		t.Fatalf("tracing on by default: %+v", rt.Tracing)
	}
}

func TestTracingProvisionsTheEndpoint(t *testing.T) {
	for _, tc := range []struct {
		yaml string
		want TracingRuntime
	}{
		{"tracing: {otlp_endpoint: 'http://127.0.0.1:4317'}",
			TracingRuntime{Enabled: true, Protocol: TracingGRPC, Endpoint: "127.0.0.1:4317", Insecure: true, SampleRatio: 1, ServiceName: "narwhal"}},
		{"tracing: {otlp_endpoint: 'https://otel.example:4318', protocol: http, sample_ratio: 0.25, service_name: edge}",
			TracingRuntime{Enabled: true, Protocol: TracingHTTP, Endpoint: "otel.example:4318", URLPath: "/v1/traces", SampleRatio: 0.25, ServiceName: "edge"}},
		{"tracing: {otlp_endpoint: 'http://c:4318/otlp/v1/traces', protocol: http, headers: [{name: x-scope-orgid, value: t1}]}",
			TracingRuntime{Enabled: true, Protocol: TracingHTTP, Endpoint: "c:4318", Insecure: true, URLPath: "/otlp/v1/traces", SampleRatio: 1, ServiceName: "narwhal",
				Headers: map[string]string{"x-scope-orgid": "t1"}}},
	} {
		cfg, err := Parse([]byte(tc.yaml+"\n"+minimal), noEnv)
		if err != nil {
			t.Fatalf("%s: %v", tc.yaml, err)
		}
		rt, err := Provision(cfg, kv.Builtin())
		if err != nil {
			t.Fatalf("%s: %v", tc.yaml, err)
		}
		got := rt.Tracing
		if got.Headers == nil {
			got.Headers = map[string]string{}
		}
		if tc.want.Headers == nil {
			tc.want.Headers = map[string]string{}
		}
		if got.Enabled != tc.want.Enabled || got.Protocol != tc.want.Protocol || got.Endpoint != tc.want.Endpoint ||
			got.Insecure != tc.want.Insecure || got.URLPath != tc.want.URLPath || got.SampleRatio != tc.want.SampleRatio ||
			got.ServiceName != tc.want.ServiceName || len(got.Headers) != len(tc.want.Headers) || got.Headers["x-scope-orgid"] != tc.want.Headers["x-scope-orgid"] {
			t.Errorf("%s: %+v, want %+v", tc.yaml, got, tc.want)
		}
	}
}

func TestTracingValuesSayWhatIsWrong(t *testing.T) {
	for _, tc := range []struct{ yaml, want string }{
		{"tracing: {otlp_endpoint: '127.0.0.1:4317'}", "tracing.otlp_endpoint: \"127.0.0.1:4317\" is not a collector URL"},
		{"tracing: {otlp_endpoint: 'http://collector'}", "is not a collector URL; write http://host:port"},
		{"tracing: {otlp_endpoint: 'grpc://c:4317'}", "is not a collector URL"},
		{"tracing: {otlp_endpoint: 'http://c:4317/v1/traces'}", "an OTLP/gRPC endpoint has no path"},
		{"tracing: {otlp_endpoint: 'http://u:p@c:4317'}", "credentials go in tracing.headers"},
		{"tracing: {protocol: thrift}", `tracing.protocol: "thrift" is not allowed`},
		{"tracing: {sample_ratio: 1.5}", "tracing.sample_ratio: 1.5 is not allowed; want a fraction from 0"},
		{"tracing: {sample_ratio: -0.1}", "tracing.sample_ratio"},
		{"tracing: {service_name: ' '}", "tracing.service_name: must not be empty"},
		{"tracing: {headers: [{name: 'bad header', value: x}]}", `tracing.headers[0].name: "bad header" is not an HTTP header name`},
		{"tracing: {headers: [{name: A, value: x}, {name: a, value: y}]}", `tracing.headers[1].name: "a" is listed twice`},
	} {
		_, err := Parse([]byte(tc.yaml+"\n"+minimal), noEnv)
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%s: error %v, want it to say %q", tc.yaml, err, tc.want)
		}
	}
}
