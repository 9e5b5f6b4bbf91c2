package discovery

import (
	"context"
	"fmt"
	"sync"

	"github.com/narwhal-router/narwhal/config"
	"github.com/narwhal-router/narwhal/transport"
)

// Names of the two sources every node runs: the Source of their engines' specs.
const (
	SourceFile  = transport.SourceFile
	SourceAdmin = transport.SourceAdmin
)

// FileSource is the configuration file's engine list: its set is the file's engines: as the
// router started, and again after every reload of the file (Set).
type FileSource struct {
	mu      sync.Mutex
	engines []config.Engine
	report  func(Report)
}

// NewFileSource is the file source with the file's engines as the router started with them.
func NewFileSource(engines []config.Engine) *FileSource {
	return &FileSource{engines: engines}
}

// Name implements Source.
func (f *FileSource) Name() string { return SourceFile }

// Seed implements Seeder: the router starts with the file's engines.
func (f *FileSource) Seed() []config.Engine {
	f.mu.Lock()
	defer f.mu.Unlock()
	return append([]config.Engine(nil), f.engines...)
}

// attach implements attacher.
func (f *FileSource) attach(report func(Report)) {
	f.mu.Lock()
	f.report = report
	f.mu.Unlock()
}

// Run implements Source. The catalog knows the set from Seed, and Set reports every reload
// itself, so Run only waits.
func (f *FileSource) Run(ctx context.Context, _ func(Report)) { <-ctx.Done() }

// Set reports the engines of a reloaded file. It returns once the catalog has taken them.
func (f *FileSource) Set(engines []config.Engine) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.engines = append([]config.Engine(nil), engines...)
	if f.report != nil {
		f.report(Report{Engines: append([]config.Engine(nil), engines...)})
	}
}

// attacher is a source of the catalog's own (file, admin) that reports from its callers'
// goroutines (a reload, an admin request) rather than from Run: the catalog hands it its
// report function when it is made, so a change is taken before the call that made it returns.
type attacher interface {
	attach(report func(Report))
}

// AdminSource holds the engines added through the admin API (POST /engines) until they are
// removed (DELETE /engines/{name}). It is not persisted: a restarted router starts without
// them, so what must survive a restart belongs in the configuration file or a discovery
// source. A name another source reports is refused (the check needs the catalog: Owns).
type AdminSource struct {
	mu      sync.Mutex
	engines []config.Engine
	report  func(Report)
	// owner says which source the fleet takes a name from ("" for none).
	owner func(name string) string
}

// NewAdminSource is an empty admin source; owner is the catalog's Owner.
func NewAdminSource(owner func(name string) string) *AdminSource {
	return &AdminSource{owner: owner}
}

// Name implements Source.
func (a *AdminSource) Name() string { return SourceAdmin }

// attach implements attacher.
func (a *AdminSource) attach(report func(Report)) {
	a.mu.Lock()
	a.report = report
	a.mu.Unlock()
}

// Seed implements Seeder: the admin source's engines so far (none, for a router starting).
func (a *AdminSource) Seed() []config.Engine {
	a.mu.Lock()
	defer a.mu.Unlock()
	return append([]config.Engine(nil), a.engines...)
}

// Run implements Source. The catalog knows the set from Seed, and Add and Remove report every
// change themselves, so Run only waits.
func (a *AdminSource) Run(ctx context.Context, _ func(Report)) { <-ctx.Done() }

// Add adds e, or replaces the admin source's engine of that name (a new engine, with a fresh
// breaker, if anything in it changed). It fails with ErrOwnedElsewhere for a name another
// source reports. It returns once the catalog has taken the change.
func (a *AdminSource) Add(e config.Engine) error {
	a.mu.Lock()
	defer a.mu.Unlock()
	if o := a.owner(e.Name); o != "" && o != SourceAdmin {
		return fmt.Errorf("%w: engine %s comes from the %s source; change it there", ErrOwnedElsewhere, e.Name, o)
	}
	next := make([]config.Engine, 0, len(a.engines)+1)
	replaced := false
	for _, x := range a.engines {
		if x.Name == e.Name {
			x, replaced = e, true
		}
		next = append(next, x)
	}
	if !replaced {
		next = append(next, e)
	}
	a.set(next)
	return nil
}

// Remove removes the admin source's engine name. It fails with ErrOwnedElsewhere for a name
// another source reports, and with ErrNotAdded for one the admin API did not add.
func (a *AdminSource) Remove(name string) error {
	a.mu.Lock()
	defer a.mu.Unlock()
	next := make([]config.Engine, 0, len(a.engines))
	for _, x := range a.engines {
		if x.Name != name {
			next = append(next, x)
		}
	}
	if len(next) == len(a.engines) {
		if o := a.owner(name); o != "" {
			return fmt.Errorf("%w: engine %s comes from the %s source; remove it there", ErrOwnedElsewhere, name, o)
		}
		return fmt.Errorf("%w: %q", ErrNotAdded, name)
	}
	a.set(next)
	return nil
}

// set keeps next and reports it; a.mu is held.
func (a *AdminSource) set(next []config.Engine) {
	a.engines = next
	if a.report != nil {
		a.report(Report{Engines: append([]config.Engine(nil), next...)})
	}
}

// ErrNotAdded is returned for removing a name the admin API did not add.
var ErrNotAdded = fmt.Errorf("no engine of that name was added through the admin API")
