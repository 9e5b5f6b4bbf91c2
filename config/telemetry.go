package config

import (
	"log/slog"
	"net/url"
	"regexp"
	"strconv"
	"strings"
)

// Metrics configures the tally reporters.
type Metrics struct {
	Statsd *Statsd `yaml:"statsd"`
}

// Statsd sends metrics to a statsd daemon over UDP.
type Statsd struct {
	Address        string  `yaml:"address"`
	Prefix         string  `yaml:"prefix"`
	FlushIntervalS Seconds `yaml:"flush_interval_s"`
}

// Tracing exports OpenTelemetry spans of client requests over OTLP (docs/configuration.md,
// "tracing"). It is off while OTLPEndpoint is empty.
type Tracing struct {
	// OTLPEndpoint is the collector's URL: http://host:port (no TLS) or https://host:port; with
	// the http protocol a path may follow (default /v1/traces).
	OTLPEndpoint string `yaml:"otlp_endpoint"`
	// Protocol is grpc (OTLP/gRPC, port 4317 by convention) or http (OTLP/HTTP protobuf, 4318).
	Protocol string `yaml:"protocol"`
	// SampleRatio is the fraction of requests without a sampled parent that are traced; a
	// client's traceparent decides for its own request.
	SampleRatio float64 `yaml:"sample_ratio"`
	// ServiceName is the service.name resource attribute.
	ServiceName string `yaml:"service_name"`
	// Headers are sent with every export (a collector's or vendor's authentication, a tenant).
	Headers []TracingHeader `yaml:"headers"`
}

// TracingHeader is one header of every trace export.
type TracingHeader struct {
	Name  string `yaml:"name"`
	Value string `yaml:"value"`
}

// Tracing protocols.
const (
	TracingGRPC = "grpc"
	TracingHTTP = "http"
)

// Log configures the process log and the access log.
type Log struct {
	Level     string `yaml:"level"`
	Format    string `yaml:"format"`
	AccessLog bool   `yaml:"access_log"`
	// AccessLogFlushS is how often the buffered access log is written out: the request path
	// never waits on a write, and a line appears at most this long after its request ended.
	AccessLogFlushS Seconds `yaml:"access_log_flush_s"`
}

func defaultTracing() Tracing {
	return Tracing{Protocol: TracingGRPC, SampleRatio: 1, ServiceName: "narwhal"}
}

func defaultLog() Log {
	return Log{Level: "info", Format: "json", AccessLog: true, AccessLogFlushS: 0.2}
}

func (m Metrics) check(ck *checker) {
	if s := m.Statsd; s != nil {
		ck.hostPort("metrics.statsd.address", s.Address, false)
		ck.positive("metrics.statsd.flush_interval_s", s.FlushIntervalS)
	}
}

// SlogLevel is log.level as the process log reads it.
func (l Log) SlogLevel() slog.Level {
	switch l.Level {
	case "debug":
		return slog.LevelDebug
	case "warn":
		return slog.LevelWarn
	case "error":
		return slog.LevelError
	}
	return slog.LevelInfo
}

func (l Log) check(ck *checker) {
	ck.oneOf("log.level", l.Level, "debug", "info", "warn", "error")
	ck.oneOf("log.format", l.Format, "json", "text")
	if f := l.AccessLogFlushS; !finite(float64(f)) || f <= 0 || f > 10 {
		ck.fail("log.access_log_flush_s", "must be a number of seconds greater than 0 and at most 10, got %v", float64(f))
	}
}

// check checks tracing.*: the endpoint is a collector URL the chosen protocol can use.
func (t Tracing) check(ck *checker) {
	ck.oneOf("tracing.protocol", t.Protocol, TracingGRPC, TracingHTTP)
	if r := t.SampleRatio; !finite(r) || r < 0 || r > 1 {
		ck.fail("tracing.sample_ratio", "%v is not allowed; want a fraction from 0 (no request without a sampled parent is traced) to 1 (every one)", r)
	}
	if strings.TrimSpace(t.ServiceName) == "" {
		ck.fail("tracing.service_name", "must not be empty (it names Narwhal's spans in the tracing backend)")
	}
	t.checkHeaders(ck)
	if t.OTLPEndpoint != "" {
		t.checkEndpoint(ck)
	}
}

func (t Tracing) checkHeaders(ck *checker) {
	seen := map[string]bool{}
	for i, h := range t.Headers {
		path := "tracing.headers[" + strconv.Itoa(i) + "]"
		switch name := strings.ToLower(h.Name); {
		case !headerName.MatchString(h.Name):
			ck.fail(path+".name", "%q is not an HTTP header name", h.Name)
		case seen[name]:
			ck.fail(path+".name", "%q is listed twice", h.Name)
		case strings.ContainsAny(h.Value, "\r\n\x00"):
			ck.fail(path+".value", "must not contain line breaks or NUL")
		}
		seen[strings.ToLower(h.Name)] = true
	}
}

func (t Tracing) checkEndpoint(ck *checker) {
	u, err := url.Parse(t.OTLPEndpoint)
	switch {
	case err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" || u.Port() == "":
		ck.fail("tracing.otlp_endpoint", "%q is not a collector URL; write http://host:port (no TLS) or https://host:port, e.g. http://127.0.0.1:4317", t.OTLPEndpoint)
	case u.User != nil || u.RawQuery != "" || u.Fragment != "":
		ck.fail("tracing.otlp_endpoint", "%q: no user, query or fragment (credentials go in tracing.headers)", t.OTLPEndpoint)
	case t.Protocol == TracingGRPC && u.Path != "" && u.Path != "/":
		ck.fail("tracing.otlp_endpoint", "%q: an OTLP/gRPC endpoint has no path (only protocol: http takes one, e.g. /v1/traces)", t.OTLPEndpoint)
	}
}

// headerName is an HTTP header field name (RFC 9110 token).
var headerName = regexp.MustCompile("^[!#$%&'*+.^_`|~0-9A-Za-z-]+$")
