package node

import (
	"fmt"
	"net"
	"slices"

	"github.com/narwhal-router/narwhal/config"
	"github.com/narwhal-router/narwhal/transport"
	"github.com/narwhal-router/narwhal/transport/discovery"
	"github.com/narwhal-router/narwhal/transport/kv"
)

// Runtime is a configuration made ready to run: the validated file, and the few values derived
// from it that need the process (a file read, the connector registry). No setting is copied
// into it: every package takes the configuration sections it uses and reads them as they are.
// Provision makes it, once at start and once per reload; a Server swaps it whole.
type Runtime struct {
	// Config is the validated configuration, a copy that shares nothing with the caller's.
	Config config.Config
	// APIKeys are server.api_keys followed by the keys of server.api_keys_file, read once here:
	// none means no client authentication.
	APIKeys []string
	// Engines are the file's engines, provisioned (their Source is discovery.SourceFile).
	Engines []transport.EngineSpec
	// Provisioner provisions every engine, from whatever source: the registry the router runs
	// with, the router's own listener ports reserved.
	Provisioner transport.Provisioner
}

// Provision validates cfg — every value, and every engine's connector name against connectors,
// the registry the router runs with — reads server.api_keys_file and provisions the file's
// engines. It reports every problem at once, naming its line when cfg came from config.Parse or
// config.Load. It is the one way from a configuration to a running router: `serve --check`
// calls it too, so a file it passes starts.
func Provision(cfg config.Config, connectors kv.Registry) (Runtime, error) {
	if err := cfg.Validate(connectors); err != nil {
		return Runtime{}, err
	}
	keys, err := cfg.Server.ClientAPIKeys() // validated readable: this read is the one that counts
	if err != nil {
		return Runtime{}, err
	}
	// The tenants' keys are client keys too (flow_control.tenants[].api_keys), each once.
	for _, k := range cfg.FlowControl.TenantKeys() {
		if !slices.Contains(keys, k) {
			keys = append(keys, k)
		}
	}
	rt := Runtime{Config: cfg.Clone(), APIKeys: keys,
		Provisioner: transport.NewProvisioner(connectors, cfg.ReservedPorts())}
	// The file's engines named by a host name that resolves to this router are refused too.
	rt.Provisioner.ResolveNames(net.DefaultResolver, nil)
	if rt.Engines, err = rt.Provisioner.Engines(cfg.Engines, discovery.SourceFile); err != nil {
		// unreachable after Validate; kept so that a gap between the two says so
		return Runtime{}, fmt.Errorf("engines: %w", err)
	}
	return rt, nil
}

// changes are the keys next changes from cur, and those of them a running router cannot
// change (config.Changes); the client keys count as changed when server.api_keys_file now holds
// other keys under the same name.
func changes(cur, next Runtime) (changed, refused []string) {
	changed, _ = config.Changes(cur.Config, next.Config)
	if !slices.Equal(cur.APIKeys, next.APIKeys) && !slices.Contains(changed, "server.api_keys") &&
		!slices.Contains(changed, "server.api_keys_file") {
		changed = append(changed, "server.api_keys_file")
	}
	return changed, config.Refused(changed)
}
