package sim

import (
	"errors"
	"fmt"
)

// FleetOptions describe a fleet of engines started in one process.
type FleetOptions struct {
	Prefill, Decode, Both int
	// Engine is the template of every engine. Name, Role, Listen and KVEndpoint are
	// set per engine (free loopback ports); a non-empty EngineID becomes
	// "<EngineID>-<name>" so identities stay distinct.
	Engine Options
}

// Fleet is a set of engines named p0…, d0…, b0… by role.
type Fleet struct {
	Engines []*Engine
}

// StartFleet starts o.Prefill prefill, o.Decode decode and o.Both both-role engines.
// On error nothing is left running.
func StartFleet(o FleetOptions) (*Fleet, error) {
	if o.Prefill < 0 || o.Decode < 0 || o.Both < 0 || o.Prefill+o.Decode+o.Both == 0 {
		return nil, fmt.Errorf("sim fleet: want a positive number of engines, got prefill=%d decode=%d both=%d",
			o.Prefill, o.Decode, o.Both)
	}
	f := &Fleet{}
	for _, group := range []struct {
		role   Role
		prefix string
		n      int
	}{{RolePrefill, "p", o.Prefill}, {RoleDecode, "d", o.Decode}, {RoleBoth, "b", o.Both}} {
		for i := range group.n {
			opts := o.Engine
			opts.Name = fmt.Sprintf("%s%d", group.prefix, i)
			opts.Role = group.role
			opts.Listen, opts.KVEndpoint = "", ""
			if opts.EngineID != "" {
				opts.EngineID += "-" + opts.Name
			}
			e, err := Start(opts)
			if err != nil {
				return nil, errors.Join(fmt.Errorf("sim fleet: %w", err), f.Close())
			}
			f.Engines = append(f.Engines, e)
		}
	}
	return f, nil
}

// ByRole returns the engines of role r, in name order.
func (f *Fleet) ByRole(r Role) []*Engine {
	var out []*Engine
	for _, e := range f.Engines {
		if e.Role() == r {
			out = append(out, e)
		}
	}
	return out
}

// Engine returns the engine named name, or nil.
func (f *Fleet) Engine(name string) *Engine {
	for _, e := range f.Engines {
		if e.Name() == name {
			return e
		}
	}
	return nil
}

// Infos describes every engine, for printing.
func (f *Fleet) Infos() []EngineInfo {
	out := make([]EngineInfo, len(f.Engines))
	for i, e := range f.Engines {
		out[i] = e.Info()
	}
	return out
}

// Close closes every engine.
func (f *Fleet) Close() error {
	var errs []error
	for _, e := range f.Engines {
		errs = append(errs, e.Close())
	}
	return errors.Join(errs...)
}
