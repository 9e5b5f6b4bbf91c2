package discovery

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sort"
	"sync"
	"time"

	"github.com/narwhal-router/narwhal/config"
	"github.com/narwhal-router/narwhal/transport"
)

// Catalog runs the sources and merges what they report into the one fleet the router runs. It
// keeps each source's last good set: a source that fails (its API server down, its DNS name
// SERVFAIL) keeps contributing the engines it knew, and says so in Status, the metrics and the
// log. Every engine is provisioned as the configuration's own list is (Options.Engines, the
// router's Provisioner: its connector registry, its listener ports reserved): one that does not
// provision (a bad URL, an unknown connector, a bad role) is skipped, with its error shown, and
// never reaches the router. A name two sources report goes to the first of them in the
// catalog's order (the order the sources were given in); the conflict is logged and shown.
// Apply gets the merged set after every change, one call at a time, in the sources' order.
type Catalog struct {
	engines transport.Provisioner
	apply   func([]transport.EngineSpec) error
	log     *slog.Logger
	metrics Metrics

	mu       sync.Mutex
	sources  []*sourceState
	owner    map[string]string // engine name → the source the merged fleet takes it from
	applied  []transport.EngineSpec
	applyErr string
	cancel   context.CancelFunc
	wg       sync.WaitGroup
}

// Metrics is what the catalog reports about its sources (telemetry.Metrics implements it).
type Metrics interface {
	DiscoverySource(source string, up bool, engines, skipped int)
	DiscoverySourceError(source string)
}

// Options configure a catalog. Apply is required.
type Options struct {
	// Engines provisions every engine a source reports: the router's Provisioner (its
	// connector registry, its listener ports reserved), the one every engine goes through.
	Engines transport.Provisioner
	// Apply hands the router the merged fleet (actors.Router.SetEngines).
	Apply   func([]transport.EngineSpec) error
	Logger  *slog.Logger
	Metrics Metrics
}

// sourceState is what the catalog knows of one source.
type sourceState struct {
	src Source
	// reported says the source reported at least once; up that its last report was a set.
	reported, up bool
	err          string
	errors       int
	// changed is when the source's set last changed, at when it last reported.
	changed, at time.Time
	// engines is the last good set, provisioned; skipped what of it could not be.
	engines []transport.EngineSpec
	skipped []Skipped
	// conflicts are the names of its engines another source took first.
	conflicts []Conflict
}

// Skipped is an engine a source reported that is not in the fleet, and why.
type Skipped struct {
	Name  string `json:"name"`
	Error string `json:"error"`
}

// Conflict is a name two sources report: the fleet takes the engine from Winner.
type Conflict struct {
	Name   string `json:"name"`
	Winner string `json:"taken_from"`
}

// Seeder is a source whose set is known before it runs (the configuration file's): the catalog
// starts with it, so the fleet the router already runs is never taken for an empty one while
// the other sources make their first reports.
type Seeder interface {
	Seed() []config.Engine
}

// NewCatalog makes a catalog of sources, in order (the first wins a name two of them report).
// Source names must be unique.
func NewCatalog(sources []Source, opts Options) (*Catalog, error) {
	if opts.Apply == nil {
		return nil, errors.New("discovery: a catalog needs Options.Apply")
	}
	c := &Catalog{engines: opts.Engines, apply: opts.Apply, log: opts.Logger, metrics: opts.Metrics, owner: map[string]string{}}
	if c.log == nil {
		c.log = slog.New(slog.DiscardHandler)
	}
	seen := map[string]bool{}
	for _, s := range sources {
		if seen[s.Name()] {
			return nil, fmt.Errorf("discovery: two sources are named %q", s.Name())
		}
		seen[s.Name()] = true
		st := &sourceState{src: s}
		if sd, ok := s.(Seeder); ok {
			c.take(st, sd.Seed(), time.Now())
		}
		if a, ok := s.(attacher); ok {
			a.attach(func(r Report) { c.report(st, r) })
		}
		c.sources = append(c.sources, st)
	}
	c.merge()
	for _, st := range c.sources {
		if st.reported {
			c.publishState(st)
		}
	}
	return c, nil
}

// Start runs every source until Close. The merged seed set is what the router was started
// with, so nothing is applied until a source reports a change.
func (c *Catalog) Start() {
	ctx, cancel := context.WithCancel(context.Background())
	c.cancel = cancel
	c.mu.Lock()
	c.applied = c.merged()
	c.mu.Unlock()
	for _, st := range c.sources {
		c.wg.Add(1)
		go func() {
			defer c.wg.Done()
			st.src.Run(ctx, func(r Report) { c.report(st, r) })
		}()
	}
}

// Close stops the sources and waits for them.
func (c *Catalog) Close() {
	if c.cancel != nil {
		c.cancel()
	}
	c.wg.Wait()
}

// report takes a source's report: a new set, or an error (the last set stays).
func (c *Catalog) report(st *sourceState, r Report) {
	c.mu.Lock()
	defer c.mu.Unlock()
	now := time.Now()
	name := st.src.Name()
	if r.Err != nil {
		wasUp := st.up || !st.reported
		st.reported, st.at = true, now
		st.up, st.err = false, r.Err.Error()
		st.errors++
		if c.metrics != nil {
			c.metrics.DiscoverySourceError(name)
		}
		if wasUp {
			c.log.Warn("discovery source failing; keeping the engines it last reported", "source", name,
				"engines", len(st.engines), "error", st.err)
		}
		c.publishState(st)
		return
	}
	if !st.up && st.reported {
		c.log.Info("discovery source back", "source", name, "engines", len(r.Engines))
	}
	c.take(st, r.Engines, now)
	c.merge()
	c.publishState(st)
	c.applyMerged()
}

// take provisions a source's set and keeps it as the source's last good one.
func (c *Catalog) take(st *sourceState, engines []config.Engine, now time.Time) {
	st.reported, st.up, st.err, st.at = true, true, "", now
	var specs []transport.EngineSpec
	var skipped []Skipped
	names := map[string]bool{}
	prev := make(map[string]string, len(st.skipped)) // what the last set skipped, and why
	for _, x := range st.skipped {
		prev[x.Name] = x.Error
	}
	for _, e := range engines {
		if names[e.Name] {
			skipped = append(skipped, Skipped{Name: e.Name, Error: "the source reports this name twice; the first is kept"})
			continue
		}
		spec, err := c.engines.From(st.src.Name(), e)
		if err != nil {
			skipped = append(skipped, Skipped{Name: e.Name, Error: err.Error()})
			if prev[e.Name] != err.Error() { // logged once, not at every report
				c.log.Warn("discovery: engine skipped", "source", st.src.Name(), "engine", e.Name, "error", err.Error())
			}
			continue
		}
		names[e.Name] = true
		specs = append(specs, spec)
	}
	if !sameSpecs(st.engines, specs) {
		st.changed = now
	}
	st.engines, st.skipped = specs, skipped
}

// merge recomputes which source each name is taken from: the first in order.
func (c *Catalog) merge() {
	owner := map[string]string{}
	for _, st := range c.sources {
		st.conflicts = st.conflicts[:0]
		for _, e := range st.engines {
			if w, taken := owner[e.Name]; taken {
				st.conflicts = append(st.conflicts, Conflict{Name: e.Name, Winner: w})
				if c.owner[e.Name] != w || !hadConflict(c, e.Name) {
					c.log.Warn("discovery: two sources report the engine; the first source's is used", "engine", e.Name,
						"used", w, "ignored", st.src.Name())
				}
				continue
			}
			owner[e.Name] = st.src.Name()
		}
	}
	c.owner = owner
}

// hadConflict says the name was already in conflict at the last merge (so it is not logged
// again on every report).
func hadConflict(c *Catalog, name string) bool {
	for _, st := range c.sources {
		for _, x := range st.conflicts {
			if x.Name == name {
				return true
			}
		}
	}
	return false
}

// merged is the fleet: every source's engines it owns, sources in order.
func (c *Catalog) merged() []transport.EngineSpec {
	var out []transport.EngineSpec
	for _, st := range c.sources {
		for _, e := range st.engines {
			if c.owner[e.Name] == st.src.Name() {
				out = append(out, e)
			}
		}
	}
	return out
}

// applyMerged hands the router the merged fleet when it differs from what it runs.
func (c *Catalog) applyMerged() {
	m := c.merged()
	if sameSpecs(c.applied, m) || c.apply == nil {
		return
	}
	if err := c.apply(m); err != nil {
		c.applyErr = err.Error()
		c.log.Error("discovery: the router did not take the fleet", "error", err.Error())
		return
	}
	c.applied, c.applyErr = m, ""
}

func (c *Catalog) publishState(st *sourceState) {
	if c.metrics != nil {
		c.metrics.DiscoverySource(st.src.Name(), st.up, len(st.engines)-len(st.conflicts), len(st.skipped)+len(st.conflicts))
	}
}

// Owner is the source the fleet takes the engine name from ("" when no source reports it).
func (c *Catalog) Owner(name string) string {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.owner[name]
}

// Status is what /discovery shows: every source in the catalog's order.
type Status struct {
	Sources []SourceStatus `json:"sources"`
	// Engines is the size of the merged fleet.
	Engines int `json:"engines"`
	// ApplyError is the router's refusal of the last merged fleet, if it refused it.
	ApplyError string `json:"apply_error,omitempty"`
}

// SourceStatus is one source's state.
type SourceStatus struct {
	Name string `json:"name"`
	// Up says the source's last report was a set; otherwise Error says why it failed, and the
	// fleet keeps the engines of its last good set (Engines).
	Up          bool       `json:"up"`
	Error       string     `json:"error,omitempty"`
	Errors      int        `json:"errors"`
	Reported    bool       `json:"reported"`
	LastReport  *time.Time `json:"last_report,omitempty"`
	LastChange  *time.Time `json:"last_change,omitempty"`
	Engines     []string   `json:"engines"`
	Skipped     []Skipped  `json:"skipped,omitempty"`
	Conflicts   []Conflict `json:"conflicts,omitempty"`
	StaleReason string     `json:"stale,omitempty"`
}

// Status reports every source's state.
func (c *Catalog) Status() Status {
	c.mu.Lock()
	defer c.mu.Unlock()
	out := Status{Engines: len(c.merged()), ApplyError: c.applyErr}
	for _, st := range c.sources {
		s := SourceStatus{Name: st.src.Name(), Up: st.up, Error: st.err, Errors: st.errors, Reported: st.reported,
			Skipped: append([]Skipped(nil), st.skipped...), Conflicts: append([]Conflict(nil), st.conflicts...), Engines: []string{}}
		if !st.at.IsZero() {
			t := st.at
			s.LastReport = &t
		}
		if !st.changed.IsZero() {
			t := st.changed
			s.LastChange = &t
		}
		for _, e := range st.engines {
			s.Engines = append(s.Engines, e.Name)
		}
		sort.Strings(s.Engines)
		if st.reported && !st.up {
			s.StaleReason = fmt.Sprintf("the source is failing: the fleet keeps the %d engines it last reported", len(st.engines))
		}
		out.Sources = append(out.Sources, s)
	}
	return out
}

// sameSpecs reports whether two provisioned sets are equal, in order, sources included.
func sameSpecs(a, b []transport.EngineSpec) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		if a[i].Source != b[i].Source || !transport.SameEngine(a[i], b[i]) {
			return false
		}
	}
	return true
}

// ErrOwnedElsewhere is returned for an engine name another source reports.
var ErrOwnedElsewhere = errors.New("another source reports this engine")
