package config

import (
	"strings"
	"testing"
)

func TestTracingIsOffByDefault(t *testing.T) {
	cfg, err := Parse([]byte(minimal), noEnv)
	if err != nil {
		t.Fatal(err)
	}
	if cfg.Tracing.OTLPEndpoint != "" || cfg.Tracing.Protocol != TracingGRPC || cfg.Tracing.SampleRatio != 1 || cfg.Tracing.ServiceName != "narwhal" {
		t.Fatalf("tracing defaults %+v", cfg.Tracing)
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
