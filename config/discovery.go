package config

import (
	"fmt"
	"net/netip"
	"regexp"
	"strconv"
	"strings"

	"k8s.io/apimachinery/pkg/labels"
)

// Discovery configures the engine sources that find engines while the router runs, beside the
// engines list of the file and the admin API: Kubernetes pods selected by label, DNS names
// re-resolved on an interval, and an etcd prefix of leased registrations. Each is off unless
// configured. docs/configuration.md describes each source, its engine names and its bounds.
type Discovery struct {
	Kubernetes *KubernetesDiscovery `yaml:"kubernetes"`
	DNS        []DNSDiscovery       `yaml:"dns"`
	Etcd       *EtcdDiscovery       `yaml:"etcd"`
	// RetryInitialS and RetryMaxS bound the backoff of a failing source: it tries again after
	// RetryInitialS, doubling after each failure up to RetryMaxS.
	RetryInitialS Seconds `yaml:"retry_initial_s"`
	RetryMaxS     Seconds `yaml:"retry_max_s"`
}

// KubernetesDiscovery watches pods, one label selector per role, in one namespace.
type KubernetesDiscovery struct {
	// Kubeconfig is the path of a kubeconfig file; empty, the in-cluster configuration (the
	// pod's service account) is used.
	Kubeconfig string `yaml:"kubeconfig"`
	// Namespace is where the pods are watched; empty, the namespace Narwhal runs in (in-cluster)
	// or the kubeconfig context's.
	Namespace   string                `yaml:"namespace"`
	Annotations KubernetesAnnotations `yaml:"annotations"`
	// Roles select the pods of each role; a pod several entries select is the first's.
	Roles []KubernetesRole `yaml:"roles"`
	// WatchTimeoutS is how long the API server keeps one watch open before it ends it (the
	// watch's timeoutSeconds; the source then watches again from where it was). A watch still
	// open WatchTimeoutS + KubernetesWatchGrace after it began is a stalled API server.
	WatchTimeoutS Seconds `yaml:"watch_timeout_s"`
}

// KubernetesWatchGrace is how long past its timeoutSeconds a watch may stay open before the
// Kubernetes source calls the API server stalled.
const KubernetesWatchGrace = 5 // seconds

// KubernetesAnnotations name the pod annotations an engine's KV identity is read from.
type KubernetesAnnotations struct {
	EngineID string `yaml:"kv_engine_id"`
	Endpoint string `yaml:"kv_endpoint"`
}

// KubernetesRole selects the pods of one role and says how to reach them.
type KubernetesRole struct {
	Role Role `yaml:"role"`
	// Selector is a label selector in kubectl's syntax (app=vllm,tier in (decode)). With
	// InferencePool, it narrows the pool's pods to this role's (empty: all of them).
	Selector string `yaml:"selector"`
	// InferencePool names a Gateway API Inference Extension InferencePool
	// (inference.networking.k8s.io/v1) of the namespace: its selector picks the pods (with
	// Selector's labels too), its target port is the engines' port.
	InferencePool string `yaml:"inference_pool"`
	// Port is the engine's container port: a number, or the name of a container port. Not set
	// with InferencePool, whose target port it is.
	Port     string         `yaml:"port"`
	Scheme   string         `yaml:"scheme"`
	Template EngineTemplate `yaml:"template"`
}

// DNSDiscovery is one DNS name re-resolved on an interval.
type DNSDiscovery struct {
	// Name is queried as written, fully qualified (no search list applies).
	Name string `yaml:"name"`
	// Type is a (IPv4 addresses), aaaa (IPv6) or srv (targets and ports).
	Type string `yaml:"type"`
	Role Role   `yaml:"role"`
	// Port is the engines' port for a and aaaa names; an SRV record carries its own.
	Port      int     `yaml:"port"`
	Scheme    string  `yaml:"scheme"`
	IntervalS Seconds `yaml:"interval_s"`
	TimeoutS  Seconds `yaml:"timeout_s"`
	// Resolver is the DNS server's host:port; empty, the servers of /etc/resolv.conf.
	Resolver string `yaml:"resolver"`
	// EnginePrefix begins the name of every engine found; empty, the name's first label.
	EnginePrefix string         `yaml:"engine_prefix"`
	Template     EngineTemplate `yaml:"template"`
}

// EtcdDiscovery watches a key prefix where engines register, one engine a key.
type EtcdDiscovery struct {
	Endpoints       []string `yaml:"endpoints"`
	Prefix          string   `yaml:"prefix"`
	DialTimeoutS    Seconds  `yaml:"dial_timeout_s"`
	RequestTimeoutS Seconds  `yaml:"request_timeout_s"`
	// CheckIntervalS is how often the source checks, while it watches, that etcd still answers
	// (a watch alone waits silently through an outage).
	CheckIntervalS Seconds `yaml:"check_interval_s"`
}

// EngineTemplate is what a discovery source gives every engine it finds, beside the name, URL,
// role and KV identity it derives.
type EngineTemplate struct {
	MaxInflight int        `yaml:"max_inflight"`
	Models      []string   `yaml:"models"`
	APIKey      string     `yaml:"api_key"`
	KV          TemplateKV `yaml:"kv"`
}

// TemplateKV is the KV side a template gives its engines.
type TemplateKV struct {
	Connector        string   `yaml:"connector"`
	TransferModes    []string `yaml:"transfer_modes"`
	AllowedEndpoints []string `yaml:"allowed_endpoints"`
}

// DNS record types a DNS source queries.
const (
	DNSTypeA    = "a"
	DNSTypeAAAA = "aaaa"
	DNSTypeSRV  = "srv"
)

// The documented defaults of the discovery section.
const (
	DefaultEngineIDAnnotation = "narwhal.io/kv-engine-id"
	DefaultEndpointAnnotation = "narwhal.io/kv-endpoint"
	DefaultEtcdEnginePrefix   = "/narwhal/engines/"
)

func defaultDiscovery() Discovery { return Discovery{RetryInitialS: 0.5, RetryMaxS: 30} }

// configured reports whether any discovery source is on.
func (d Discovery) configured() bool { return d.Kubernetes != nil || len(d.DNS) > 0 || d.Etcd != nil }

// roles reports whether the configured sources may find prefill- and decode-capable engines.
func (d Discovery) roles() (prefill, decode bool) {
	add := func(r Role) { prefill, decode = prefill || r.CanPrefill(), decode || r.CanDecode() }
	if k := d.Kubernetes; k != nil {
		for _, r := range k.Roles {
			add(r.Role)
		}
	}
	for _, n := range d.DNS {
		add(n.Role)
	}
	if d.Etcd != nil { // registrations carry their own roles
		prefill, decode = true, true
	}
	return prefill, decode
}

// applyDefaults fills the defaults of the optional sections that were configured; set reports
// whether the file wrote a key, so that a value written as 0 or "" is refused, not replaced.
func (d *Discovery) applyDefaults(set func(path string) bool) {
	def := func(path string, empty bool, fill func()) {
		if empty && !set(path) {
			fill()
		}
	}
	if k := d.Kubernetes; k != nil {
		def("discovery.kubernetes.annotations.kv_engine_id", k.Annotations.EngineID == "", func() { k.Annotations.EngineID = DefaultEngineIDAnnotation })
		def("discovery.kubernetes.annotations.kv_endpoint", k.Annotations.Endpoint == "", func() { k.Annotations.Endpoint = DefaultEndpointAnnotation })
		def("discovery.kubernetes.watch_timeout_s", k.WatchTimeoutS == 0, func() { k.WatchTimeoutS = 60 })
		for i := range k.Roles {
			r, p := &k.Roles[i], fmt.Sprintf("discovery.kubernetes.roles[%d]", i)
			def(p+".port", r.Port == "" && r.InferencePool == "", func() { r.Port = "8000" })
			def(p+".scheme", r.Scheme == "", func() { r.Scheme = "http" })
		}
	}
	for i := range d.DNS {
		n, p := &d.DNS[i], fmt.Sprintf("discovery.dns[%d]", i)
		def(p+".type", n.Type == "", func() { n.Type = DNSTypeA })
		def(p+".scheme", n.Scheme == "", func() { n.Scheme = "http" })
		def(p+".interval_s", n.IntervalS == 0, func() { n.IntervalS = 5 })
		def(p+".timeout_s", n.TimeoutS == 0, func() { n.TimeoutS = 2 })
	}
	if e := d.Etcd; e != nil {
		def("discovery.etcd.prefix", e.Prefix == "", func() { e.Prefix = DefaultEtcdEnginePrefix })
		def("discovery.etcd.dial_timeout_s", e.DialTimeoutS == 0, func() { e.DialTimeoutS = 5 })
		def("discovery.etcd.request_timeout_s", e.RequestTimeoutS == 0, func() { e.RequestTimeoutS = 5 })
		def("discovery.etcd.check_interval_s", e.CheckIntervalS == 0, func() { e.CheckIntervalS = 5 })
	}
}

// maxDiscoveryNames bounds discovery.dns and discovery.kubernetes.roles: more than any fleet
// has.
const maxDiscoveryNames = 64

// minDiscoveryInterval is the shortest discovery.dns[].interval_s and retry_initial_s: a DNS
// server is not to be queried in a busy loop.
const minDiscoveryInterval = 0.05

var (
	// portName is an IANA service name, what a container port's name must be.
	portName = regexp.MustCompile(`^[a-z0-9]([a-z0-9-]{0,13}[a-z0-9])?$`)
	dnsLabel = regexp.MustCompile(`^[A-Za-z0-9_]([A-Za-z0-9_-]{0,61}[A-Za-z0-9])?$`)
	// prefixName is what an engine prefix may be: the start of an engine name, without dots.
	prefixName   = regexp.MustCompile(`^[A-Za-z0-9][A-Za-z0-9_-]{0,23}$`)
	namespaceRe  = regexp.MustCompile(`^[a-z0-9]([a-z0-9-]{0,61}[a-z0-9])?$`)
	annotationRe = regexp.MustCompile(`^([a-z0-9]([a-z0-9.-]{0,251}[a-z0-9])?/)?[A-Za-z0-9]([A-Za-z0-9_.-]{0,61}[A-Za-z0-9])?$`)
)

func (d Discovery) check(ck *checker) {
	if f := float64(d.RetryInitialS); !finite(f) || f < minDiscoveryInterval || f > 3600 {
		ck.fail("discovery.retry_initial_s", "%v is not allowed; want a number of seconds from %v to 3600", f, minDiscoveryInterval)
	}
	if f := float64(d.RetryMaxS); !finite(f) || f < float64(d.RetryInitialS) || f > 3600 {
		ck.fail("discovery.retry_max_s", "%v is not allowed; want a number of seconds from discovery.retry_initial_s (%v) to 3600", f, float64(d.RetryInitialS))
	}
	if k := d.Kubernetes; k != nil {
		k.check(ck)
	}
	d.checkDNS(ck)
	if e := d.Etcd; e != nil {
		e.check(ck)
	}
}

// checkDNS checks every DNS name, and that no two give their engines the same prefix.
func (d Discovery) checkDNS(ck *checker) {
	if len(d.DNS) > maxDiscoveryNames {
		ck.fail("discovery.dns", "lists %d names; at most %d are allowed", len(d.DNS), maxDiscoveryNames)
	}
	prefixes := map[string]int{}
	for i, n := range d.DNS {
		p := fmt.Sprintf("discovery.dns[%d]", i)
		n.check(ck, p)
		prefix := n.Prefix()
		if j, dup := prefixes[prefix]; dup {
			ck.fail(p+".engine_prefix", "%q is also the engine prefix of discovery.dns[%d]; engine names would collide: set a different engine_prefix on one of them", prefix, j)
		}
		prefixes[prefix] = i
	}
}

func (e *EtcdDiscovery) check(ck *checker) {
	if len(e.Endpoints) == 0 {
		ck.fail("discovery.etcd.endpoints", "must list at least one etcd client URL (e.g. http://127.0.0.1:2379)")
	}
	for i, ep := range e.Endpoints {
		ck.etcdEndpoint(fmt.Sprintf("discovery.etcd.endpoints[%d]", i), ep)
	}
	if !strings.HasPrefix(e.Prefix, "/") || len(e.Prefix) < 2 {
		ck.fail("discovery.etcd.prefix", "%q is not allowed; want a key prefix starting with '/' (e.g. %s)", e.Prefix, DefaultEtcdEnginePrefix)
	}
	ck.positive("discovery.etcd.dial_timeout_s", e.DialTimeoutS)
	ck.positive("discovery.etcd.request_timeout_s", e.RequestTimeoutS)
	ck.positive("discovery.etcd.check_interval_s", e.CheckIntervalS)
}

func (k *KubernetesDiscovery) check(ck *checker) {
	if k.Namespace != "" && !namespaceRe.MatchString(k.Namespace) {
		ck.fail("discovery.kubernetes.namespace", "%q is not a namespace name (lowercase letters, digits and '-', up to 63)", k.Namespace)
	}
	for _, a := range [...]struct{ key, name string }{{"kv_engine_id", k.Annotations.EngineID}, {"kv_endpoint", k.Annotations.Endpoint}} {
		if !annotationRe.MatchString(a.name) {
			ck.fail("discovery.kubernetes.annotations."+a.key, "%q is not an annotation name (an optional DNS prefix and '/', then up to 63 letters, digits, '-', '_', '.')", a.name)
		}
	}
	if f := float64(k.WatchTimeoutS); !finite(f) || f < 1 || f > 3600 {
		ck.fail("discovery.kubernetes.watch_timeout_s", "%v is not allowed; want a number of seconds from 1 to 3600", f)
	}
	if len(k.Roles) == 0 {
		ck.fail("discovery.kubernetes.roles", "selects no pods; list at least one role with its selector, e.g. {role: decode, selector: \"app=vllm,role=decode\"}")
	}
	if len(k.Roles) > maxDiscoveryNames {
		ck.fail("discovery.kubernetes.roles", "lists %d entries; at most %d are allowed", len(k.Roles), maxDiscoveryNames)
	}
	for i, r := range k.Roles {
		r.check(ck, fmt.Sprintf("discovery.kubernetes.roles[%d]", i))
	}
}

// check checks one role's entry at path p.
func (r KubernetesRole) check(ck *checker, p string) {
	ck.oneOf(p+".role", string(r.Role), string(RolePrefill), string(RoleDecode), string(RoleBoth))
	switch {
	case r.InferencePool != "" && !namespaceRe.MatchString(r.InferencePool):
		ck.fail(p+".inference_pool", "%q is not an InferencePool name (lowercase letters, digits and '-', up to 63)", r.InferencePool)
	case r.InferencePool == "" && strings.TrimSpace(r.Selector) == "":
		ck.fail(p+".selector", "must not be empty (it would select every pod of the namespace); write a label selector, e.g. app=vllm,role=decode, or name an inference_pool")
	}
	if _, err := labels.Parse(r.Selector); err != nil {
		ck.fail(p+".selector", "%q is not a label selector (kubectl's -l syntax: app=vllm,role in (decode)): %v", r.Selector, err)
	}
	if r.InferencePool != "" {
		if r.Port != "" {
			ck.fail(p+".port", "must not be set with inference_pool: the pool's targetPorts give the engines' port")
		}
	} else if n, err := strconv.Atoi(r.Port); err == nil {
		if n < 1 || n > 65535 {
			ck.fail(p+".port", "%d is not allowed; want a port from 1 to 65535 or a container port name", n)
		}
	} else if !portName.MatchString(r.Port) || !strings.ContainsAny(r.Port, "abcdefghijklmnopqrstuvwxyz") || strings.Contains(r.Port, "--") {
		ck.fail(p+".port", "%q is not allowed; want a port from 1 to 65535 or a container port name (up to 15 lowercase letters, digits and '-')", r.Port)
	}
	ck.oneOf(p+".scheme", r.Scheme, "http", "https")
	ck.engineFields(p+".template", r.Template.Engine())
}

// check checks one DNS name's entry at path p.
func (n DNSDiscovery) check(ck *checker, p string) {
	n.checkName(ck, p)
	ck.oneOf(p+".type", n.Type, DNSTypeA, DNSTypeAAAA, DNSTypeSRV)
	ck.oneOf(p+".role", string(n.Role), string(RolePrefill), string(RoleDecode), string(RoleBoth))
	switch {
	case n.Type == DNSTypeSRV && n.Port != 0:
		ck.fail(p+".port", "must not be set with type srv: every SRV record carries its own port")
	case n.Type != DNSTypeSRV && (n.Port < 1 || n.Port > 65535):
		ck.fail(p+".port", "%d is not allowed; want the engines' port, from 1 to 65535 (required with type %s)", n.Port, n.Type)
	}
	ck.oneOf(p+".scheme", n.Scheme, "http", "https")
	if f := float64(n.IntervalS); !finite(f) || f < minDiscoveryInterval || f > 3600 {
		ck.fail(p+".interval_s", "%v is not allowed; want a number of seconds from %v to 3600", f, minDiscoveryInterval)
	}
	ck.positive(p+".timeout_s", n.TimeoutS)
	if n.TimeoutS > 60 {
		ck.fail(p+".timeout_s", "%v is not allowed; want a number of seconds greater than 0 and at most 60", float64(n.TimeoutS))
	}
	if n.Resolver != "" {
		if _, err := netip.ParseAddr(n.Resolver); err != nil {
			ck.hostPort(p+".resolver", n.Resolver, false)
		}
	}
	if n.EnginePrefix != "" && !prefixName.MatchString(n.EnginePrefix) {
		ck.fail(p+".engine_prefix", "%q is not allowed; want up to 24 letters, digits, '_' and '-', starting with a letter or digit", n.EnginePrefix)
	}
	ck.engineFields(p+".template", n.Template.Engine())
}

// checkName checks that the name is a DNS name, label by label.
func (n DNSDiscovery) checkName(ck *checker, p string) {
	name := strings.TrimSuffix(n.Name, ".")
	if name == "" || len(name) > 253 {
		ck.fail(p+".name", "%q is not a DNS name; write a fully qualified name such as vllm-decode.llm.svc.cluster.local", n.Name)
		return
	}
	for _, l := range strings.Split(name, ".") {
		if !dnsLabel.MatchString(l) {
			ck.fail(p+".name", "%q is not a DNS name (label %q); write a fully qualified name such as vllm-decode.llm.svc.cluster.local", n.Name, l)
			return
		}
	}
}

func (ck *checker) etcdEndpoint(p, ep string) {
	rest, ok := strings.CutPrefix(ep, "http://")
	if !ok {
		ck.fail(p, "%q is not allowed; write an etcd client URL http://host:port (https is not supported: there are no client certificate settings yet)", ep)
		return
	}
	ck.hostPort(p, rest, false)
}

// Prefix begins the name of every engine the name's records give: engine_prefix, else
// DNSEnginePrefix of the name.
func (n DNSDiscovery) Prefix() string {
	if n.EnginePrefix != "" {
		return n.EnginePrefix
	}
	return DNSEnginePrefix(n.Name)
}

// DNSEnginePrefix is the engine prefix of a DNS name without engine_prefix: its first label that
// does not start with '_' (so _http._tcp.vllm.service.consul gives vllm), cut to 24 characters.
func DNSEnginePrefix(name string) string {
	for _, l := range strings.Split(strings.TrimSuffix(name, "."), ".") {
		if l == "" || strings.HasPrefix(l, "_") {
			continue
		}
		l = strings.Trim(strings.ReplaceAll(l, ".", "-"), "-_")
		if len(l) > 24 {
			l = strings.TrimRight(l[:24], "-_")
		}
		if l != "" {
			return l
		}
	}
	return "dns"
}

// Engine is the template as an engine without a name, URL or role, its defaults filled: what a
// source completes for every engine it finds.
func (t EngineTemplate) Engine() Engine {
	e := Engine{MaxInflight: t.MaxInflight, Models: t.Models, APIKey: t.APIKey,
		KV: KV{Connector: t.KV.Connector, TransferModes: t.KV.TransferModes, AllowedEndpoints: t.KV.AllowedEndpoints}}
	e.applyDefaults()
	return e.Clone()
}
