package transport

import (
	"errors"
	"fmt"
	"net/url"
	"reflect"

	"github.com/narwhal-router/narwhal/config"
	"github.com/narwhal-router/narwhal/transport/kv"
)

// EngineSpec is one engine as the router runs it: its configuration entry (the file's, the
// admin API's or a discovery source's) checked and resolved — its URL parsed, its connector
// found in the registry, its KV side assembled. A Provisioner makes it.
type EngineSpec struct {
	Name string
	// Source names where the engine was found ("file" for the configuration's list, "admin",
	// or a discovery source's name). It is a label: two specs that differ only in it describe
	// the same engine.
	Source string
	// URL is the engine's base URL as configured; Base is its scheme://host[:port], Addr the
	// host:port to dial (the scheme's port when the URL names none), TLS whether it is https.
	URL  string
	Base string
	Addr string
	TLS  bool
	Role config.Role
	// MaxInflight caps the engine's phase reservations (0: no cap).
	MaxInflight int
	// Models are the models configured for the engine; none: it is asked (/v1/models).
	Models []string
	APIKey string
	// Connector is the engine's kv.connector, resolved; KV is its side of the transfer.
	Connector kv.Connector
	KV        kv.Side
	// KVEvents are the engine's own KV event endpoints (engines[].kv_events), as configured.
	KVEvents config.EngineKVEvents
	// DataParallelSize is engines[].data_parallel_size: the engine's ranks, 0 to read them from
	// its metrics.
	DataParallelSize int
}

// Provisioner is the one way from an engine entry, whichever source it came from (the file,
// POST /engines, Kubernetes, DNS, etcd), to the spec of a running engine: it holds the entry to
// the file's rules, resolves its connector against the registry the router runs with, and keeps
// its descriptors off the router's own listener ports. The node makes one from the
// configuration (config.Config.ReservedPorts); the discovery catalog provisions every source's
// engines with it. The zero Provisioner knows no connector.
type Provisioner struct {
	connectors kv.Registry
	reserved   []int
	// own are the ports of the router's listeners: reserved, then what Listening adds.
	own *ownListeners
	// names resolves the host names engines are given by, for the same check (ResolveNames).
	names *hostNames
}

// Names of the sources whose engines the operator writes (the configuration file, the admin
// API behind server.admin_token): their kv.endpoint pins are the operator's word. Every other
// source is a registrant, whose pins are held to the endpoint policy (kv.CheckPin).
const (
	SourceFile  = "file"
	SourceAdmin = "admin"
)

// NewProvisioner provisions engines against connectors, no descriptor of theirs naming one of
// reserved (the router's own listener ports), and no engine's URL, KV pin or KV event endpoint
// naming one of the router's listeners (reserved, and what Listening adds) by address, or by a
// name that resolves to one once ResolveNames gave it a resolver.
func NewProvisioner(connectors kv.Registry, reserved []int) Provisioner {
	own := &ownListeners{}
	own.add(reserved...)
	return Provisioner{connectors: connectors, reserved: append([]int(nil), reserved...), own: own, names: newHostNames()}
}

// Connectors is the registry engines are provisioned against.
func (p Provisioner) Connectors() kv.Registry { return p.connectors }

// Engine checks e as an engine the operator wrote (From with SourceFile) and resolves it. The
// spec's Source is left to the caller.
func (p Provisioner) Engine(e config.Engine) (EngineSpec, error) {
	spec, err := p.From(SourceFile, e)
	spec.Source = ""
	return spec, err
}

// From checks e, reported by source, and resolves it. Every source's engines pass the same
// checks: the configuration's (config.CheckEngine: its name, URL — no credentials, a bounded
// host — role, models, KV side and connector name), then the router's own (no URL, KV pin or
// KV event endpoint naming one of the router's listeners; no kv.allowed_ports covering one;
// the pin held to the endpoint policy, kv.CheckPin, by the trust its source has). The error
// names the engine and every problem.
func (p Provisioner) From(source string, e config.Engine) (EngineSpec, error) {
	return p.from(source, source == SourceFile || source == SourceAdmin, e)
}

// from is From, the source's trust given: operator for engines the operator wrote.
func (p Provisioner) from(source string, operator bool, e config.Engine) (EngineSpec, error) {
	if err := config.CheckEngine(e, p.connectors); err != nil {
		return EngineSpec{}, fmt.Errorf("engine %s: %w", e.Name, err)
	}
	spec, err := p.resolve(e)
	if err != nil {
		return EngineSpec{}, fmt.Errorf("engine %s: %w", e.Name, err)
	}
	if err := p.checkOwn(operator, spec); err != nil {
		return EngineSpec{}, fmt.Errorf("engine %s: %w", e.Name, err)
	}
	spec.Source = source
	return spec, nil
}

// resolve makes the spec of a checked engine.
func (p Provisioner) resolve(e config.Engine) (EngineSpec, error) {
	u, err := url.Parse(e.URL)
	if err != nil {
		return EngineSpec{}, errors.New("url: not an engine base URL") // unreachable after config.CheckEngine
	}
	conn, err := p.connectors.For(e.KV.Connector)
	if err != nil {
		return EngineSpec{}, err
	}
	ranges, err := config.ParsePorts(e.KV.AllowedPorts)
	if err != nil {
		return EngineSpec{}, fmt.Errorf("kv.allowed_ports%w", err)
	}
	ports := make([]kv.PortRange, len(ranges))
	for i, r := range ranges {
		ports[i] = kv.PortRange(r)
	}
	addr := u.Host
	if u.Port() == "" {
		port := "80"
		if u.Scheme == "https" {
			port = "443"
		}
		addr = u.Hostname() + ":" + port
	}
	modes := e.KV.TransferModes
	if len(modes) == 0 {
		modes = []string{"pull"}
	}
	return EngineSpec{
		Name: e.Name, URL: e.URL, Base: u.Scheme + "://" + u.Host, Addr: addr, TLS: u.Scheme == "https",
		Role: e.Role, MaxInflight: e.MaxInflight, Models: append([]string(nil), e.Models...), APIKey: e.APIKey,
		Connector: conn,
		KV: kv.Side{
			Engine: e.Name, Connector: conn.Name(), EngineID: e.KV.EngineID, Endpoint: e.KV.Endpoint,
			TransferModes: append([]string(nil), modes...), Host: u.Hostname(),
			AllowedEndpoints: append([]string(nil), e.KV.AllowedEndpoints...), AllowedPorts: ports,
			ReservedPorts: p.reserved,
		},
		KVEvents:         e.KVEvents,
		DataParallelSize: e.DataParallelSize,
	}, nil
}

// Engines provisions the operator's own list of engines (the configuration file's), in order,
// their Source set to source; the error joins every engine's. Their pins are the operator's
// word, as From takes the file's.
func (p Provisioner) Engines(engines []config.Engine, source string) ([]EngineSpec, error) {
	out := make([]EngineSpec, 0, len(engines))
	var errs []error
	for _, e := range engines {
		spec, err := p.from(source, true, e)
		if err != nil {
			errs = append(errs, err)
			continue
		}
		out = append(out, spec)
	}
	if len(errs) > 0 {
		return nil, errors.Join(errs...)
	}
	return out, nil
}

// SameEngine reports whether two specs describe the same engine: equal in everything but their
// Source (connectors compared by name). An engine whose spec changes otherwise is a new engine.
func SameEngine(a, b EngineSpec) bool {
	if (a.Connector == nil) != (b.Connector == nil) || (a.Connector != nil && a.Connector.Name() != b.Connector.Name()) {
		return false
	}
	a.Source, b.Source, a.Connector, b.Connector = "", "", nil, nil
	return reflect.DeepEqual(a, b)
}
