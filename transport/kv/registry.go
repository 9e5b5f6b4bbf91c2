package kv

import (
	"fmt"
	"sort"
	"strings"
)

// Registry is the set of connectors engines may name in engines[].kv.connector. It is explicit:
// nothing registers itself; the composition root passes the registry it wants (Builtin, or
// Builtin().With(...) for a connector of its own, as the tests do).
type Registry struct {
	byName map[string]Connector
}

// Builtin is every connector Narwhal ships. A new connector is listed here; configuration
// validation checks engines' connector names against the registry the router runs with, so
// nothing else needs the name.
func Builtin() Registry { return Registry{}.With(nixlConnector{}, newMooncake()) }

// With returns a copy of r that also holds cs (replacing connectors of the same name).
func (r Registry) With(cs ...Connector) Registry {
	out := Registry{byName: make(map[string]Connector, len(r.byName)+len(cs))}
	for k, c := range r.byName {
		out.byName[k] = c
	}
	for _, c := range cs {
		out.byName[c.Name()] = c
	}
	return out
}

// ObserveBootstrap has every connector of r that asks producers' bootstrap servers (Mooncake)
// report what it learns to o. The composition root calls it once, before any attempt.
func (r Registry) ObserveBootstrap(o BootstrapObserver) {
	for _, c := range r.byName {
		if b, ok := c.(interface{ observe(BootstrapObserver) }); ok {
			b.observe(o)
		}
	}
}

// Lookup returns the named connector, or an error listing the known ones.
func (r Registry) Lookup(name string) (Connector, error) {
	if c, ok := r.byName[name]; ok {
		return c, nil
	}
	return nil, fmt.Errorf("unknown KV connector %q (known: %s)", name, strings.Join(r.Names(), ", "))
}

// Names lists the registry's connector names, sorted.
func (r Registry) Names() []string {
	out := make([]string, 0, len(r.byName))
	for k := range r.byName {
		out = append(out, k)
	}
	sort.Strings(out)
	return out
}

// Has reports whether the registry holds a connector of that name.
func (r Registry) Has(name string) bool {
	_, ok := r.byName[name]
	return ok
}

// Default is the connector of an engine whose configuration names none.
const Default = NIXL

// For returns the connector an engine's kv.connector names ("" is the default, nixl).
func (r Registry) For(name string) (Connector, error) {
	if name == "" {
		name = Default
	}
	return r.Lookup(name)
}
