package config

import (
	"errors"
	"fmt"
	"net"
	"net/netip"
	"regexp"
	"strings"
)

// Role says which legs an engine may run.
type Role string

// Engine roles.
const (
	RolePrefill Role = "prefill"
	RoleDecode  Role = "decode"
	RoleBoth    Role = "both"
)

// CanPrefill reports whether the role may run the prefill leg.
func (r Role) CanPrefill() bool { return r == RolePrefill || r == RoleBoth }

// CanDecode reports whether the role may run the decode leg.
func (r Role) CanDecode() bool { return r == RoleDecode || r == RoleBoth }

// Engine is one vLLM-compatible server behind the router.
type Engine struct {
	Name string `yaml:"name"`
	URL  string `yaml:"url"`
	Role Role   `yaml:"role"`
	// MaxInflight caps the phase reservations held on the engine at once (both phases
	// together); 0 means no cap.
	MaxInflight int      `yaml:"max_inflight"`
	Models      []string `yaml:"models"`
	APIKey      string   `yaml:"api_key,omitempty"`
	KV          KV       `yaml:"kv"`
	// KVEvents names the engine's own KV event endpoints (placement.kv_events has the
	// fleet's patterns).
	KVEvents EngineKVEvents `yaml:"kv_events"`
	// DataParallelSize is the engine's data-parallel ranks (vLLM's --data-parallel-size): 0
	// reads them from its metrics, 1 treats it as one rank (ranks.go).
	DataParallelSize int `yaml:"data_parallel_size"`
}

// KV describes an engine's side of the KV transfer.
type KV struct {
	Connector string `yaml:"connector"`
	// EngineID pins the identity the producer must advertise (a `_dp<N>` suffix is accepted).
	EngineID string `yaml:"engine_id"`
	// Endpoint pins the host:port the producer must advertise for its KV side channel.
	Endpoint string `yaml:"endpoint"`
	// TransferModes lists the `transfer_mode` values this engine accepts as a consumer.
	TransferModes []string `yaml:"transfer_modes"`
	// AllowedEndpoints, when set, is where an unpinned producer may point consumers for the KV
	// transfer: CIDRs (10.0.0.0/8) or exact host:port entries. Unset, the KV host must be the
	// producer's own host (from its url).
	AllowedEndpoints []string `yaml:"allowed_endpoints"`
	// AllowedPorts are the ports an unpinned producer's descriptor may name on its own host (or
	// on a host an allowed_endpoints CIDR covers): "5600" or "5600-5663" entries; none: the
	// range vLLM's NIXL connector listens on (transport/kv DefaultAllowedPorts). The router's
	// own listener ports are never allowed there.
	AllowedPorts []string `yaml:"allowed_ports"`
}

// DefaultConnector is engines[].kv.connector when the file names none: the default of the
// connector registry (transport/kv's Default; a test of transport keeps the two equal).
const DefaultConnector = "nixl"

// applyDefaults fills the per-engine defaults that depend on nothing else.
func (e *Engine) applyDefaults() {
	if e.KV.Connector == "" {
		e.KV.Connector = DefaultConnector
	}
	if len(e.KV.TransferModes) == 0 {
		e.KV.TransferModes = []string{"pull"}
	}
}

// EngineContract pins what every engine must be; readmission and preflight check it.
type EngineContract struct {
	Model       string `yaml:"model"`
	MaxModelLen int    `yaml:"max_model_len"`
	Version     string `yaml:"version"`
	Connector   string `yaml:"connector"`
}

// Preflight configures the contract check and KV transfer matrix (`narwhal preflight`, and
// `narwhal serve` with Require all).
type Preflight struct {
	// Concurrency bounds how many producer→consumer probes run at once.
	Concurrency int `yaml:"concurrency"`
	// Require is what `narwhal serve` demands before it listens: RequireNone (start at once;
	// each engine joins after its own check) or RequireAll (the whole matrix must pass).
	Require string `yaml:"require"`
}

// Preflight requirements.
const (
	RequireNone = "none"
	RequireAll  = "all"
)

func defaultPreflight() Preflight { return Preflight{Concurrency: 4, Require: RequireNone} }

func (ec *EngineContract) check(ck *checker) {
	if ec == nil {
		return
	}
	if ec.Model == "" && ec.Version == "" && ec.Connector == "" && ec.MaxModelLen == 0 {
		ck.fail("engine_contract", "pins nothing; set at least one of model, max_model_len, version, connector")
	}
	if ec.MaxModelLen < 0 {
		ck.fail("engine_contract.max_model_len", "must be a token count, got %d", ec.MaxModelLen)
	}
}

func (p Preflight) check(ck *checker) {
	if p.Concurrency < 1 {
		ck.fail("preflight.concurrency", "must be 1 or more, got %d", p.Concurrency)
	}
	ck.oneOf("preflight.require", p.Require, RequireNone, RequireAll)
}

var engineName = regexp.MustCompile(`^[A-Za-z0-9][A-Za-z0-9_.-]{0,63}$`)

func (c *Config) validateEngines(ck *checker) {
	dynamic := c.Discovery.configured()
	if len(c.Engines) == 0 && !dynamic {
		ck.fail("engines", "lists no engine; add at least one prefill-capable and one decode-capable engine, or configure a discovery source")
		return
	}
	names := map[string]int{}
	canPrefill, canDecode := c.Discovery.roles()
	for i, e := range c.Engines {
		p := fmt.Sprintf("engines[%d]", i)
		if j, dup := names[e.Name]; dup && engineName.MatchString(e.Name) {
			ck.fail(p+".name", "%q is already the name of engines[%d]; names must be unique", e.Name, j)
		}
		names[e.Name] = i
		ck.engine(p, e)
		ck.checkAllowedPorts(c, i, e)
		canPrefill = canPrefill || e.Role.CanPrefill()
		canDecode = canDecode || e.Role.CanDecode()
	}
	also := ""
	if dynamic {
		also = " (in the list or in a discovery source)"
	}
	if !canPrefill {
		ck.fail("engines", "no engine can run the prefill leg; give at least one the role prefill or both%s", also)
	}
	if !canDecode {
		ck.fail("engines", "no engine can run the decode leg; give at least one the role decode or both%s", also)
	}
}

// CheckEngine checks one engine as the engines list's entries are checked (name, url, role,
// max_inflight, models, kv), for an engine that comes from elsewhere than the file: a discovery
// source's registration, an engine of the admin API. Its connector name is checked against
// connectors (nil: not checked; engine provisioning, transport.Provisioner, checks it against
// the registry the router runs with). The messages name the keys without a path.
func CheckEngine(e Engine, connectors Connectors) error {
	ck := &checker{connectors: connectors}
	ck.engine("", e)
	return errors.Join(ck.errs...)
}

// engine checks one engine's own keys at path p.
func (ck *checker) engine(p string, e Engine) {
	if !engineName.MatchString(e.Name) {
		ck.fail(joinPath(p, "name"), "%q is not a usable name (letters, digits, '_', '.', '-', up to 64, starting with a letter or digit)", e.Name)
	}
	ck.engineURL(joinPath(p, "url"), e.URL)
	ck.oneOf(joinPath(p, "role"), string(e.Role), string(RolePrefill), string(RoleDecode), string(RoleBoth))
	if e.KV.Endpoint != "" {
		ck.hostPort(joinPath(p, "kv.endpoint"), e.KV.Endpoint, false)
	}
	if e.KVEvents.Endpoint != KVEventsOff {
		ck.kvEventsEndpoint(joinPath(p, "kv_events.endpoint"), e.KVEvents.Endpoint, false)
	} else if e.KVEvents.ReplayEndpoint != "" {
		ck.fail(joinPath(p, "kv_events.replay_endpoint"), "is set but kv_events.endpoint is %q: leave it out", KVEventsOff)
	}
	ck.kvEventsEndpoint(joinPath(p, "kv_events.replay_endpoint"), e.KVEvents.ReplayEndpoint, false)
	ck.engineFields(p, e)
	ck.dataParallelSize(joinPath(p, "data_parallel_size"), e.DataParallelSize)
}

// engineFields checks the keys an engine shares with a discovery source's template.
func (ck *checker) engineFields(p string, e Engine) {
	if e.MaxInflight < 0 {
		ck.fail(joinPath(p, "max_inflight"), "must be 0 (no cap) or more, got %d", e.MaxInflight)
	}
	for j, m := range e.Models {
		if strings.TrimSpace(m) == "" {
			ck.fail(fmt.Sprintf("%s[%d]", joinPath(p, "models"), j), "is empty; write a model name as clients send it")
		}
	}
	if e.KV.Connector != "" && ck.connectors != nil && !ck.connectors.Has(e.KV.Connector) {
		ck.oneOf(joinPath(p, "kv.connector"), e.KV.Connector, ck.connectors.Names()...)
	}
	for j, a := range e.KV.AllowedEndpoints {
		path := fmt.Sprintf("%s[%d]", joinPath(p, "kv.allowed_endpoints"), j)
		if _, err := netip.ParsePrefix(a); err == nil {
			continue
		}
		if h, port, err := net.SplitHostPort(a); err != nil || h == "" || strings.ContainsAny(h, "/@ ") {
			ck.fail(path, "%q is not allowed; want a CIDR (10.0.0.0/8) or a host:port", a)
		} else {
			ck.port(path, a, port, false)
		}
	}
	for j, m := range e.KV.TransferModes {
		ck.oneOf(fmt.Sprintf("%s[%d]", joinPath(p, "kv.transfer_modes"), j), m, "pull", "push")
	}
}
