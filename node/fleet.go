package node

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/narwhal-router/narwhal/config"
	"github.com/narwhal-router/narwhal/messages"
	"github.com/narwhal-router/narwhal/transport"
	"github.com/narwhal-router/narwhal/transport/admin"
	"github.com/narwhal-router/narwhal/transport/discovery"
)

// startSources builds the fleet's sources — the configuration file's engine list, the admin
// API's engines, then whatever the discovery section names (discoverySources), in that order:
// a name two of them report goes to the first — and starts the catalog that merges them into
// the router's fleet. The router already runs the file's engines, so nothing changes until a
// source reports something new.
func (s *Server) startSources(rt Runtime) error {
	s.file = discovery.NewFileSource(rt.Config.FileEngines())
	var catalog *discovery.Catalog
	s.admins = discovery.NewAdminSource(func(name string) string { return catalog.Owner(name) })
	found, err := discoverySources(rt.Config.Discovery, s.log)
	if err != nil {
		return fmt.Errorf("discovery: %w", err)
	}
	sources := append([]discovery.Source{s.file, s.admins}, found...)
	catalog, err = discovery.NewCatalog(sources, discovery.Options{
		Engines: s.provision,
		Apply: func(specs []transport.EngineSpec) error {
			ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
			defer cancel()
			return s.router.SetEngines(ctx, specs)
		},
		Logger:  s.log,
		Metrics: s.reporting.Metrics,
	})
	if err != nil {
		return err
	}
	s.catalog = catalog
	catalog.Start()
	return nil
}

// addEngine adds an engine given in the configuration's shape through the admin source, and
// returns its state (joining, until its check passes).
func (s *Server) addEngine(ctx context.Context, body []byte) (messages.EngineState, error) {
	e, err := config.ParseEngine(body)
	if err == nil {
		_, err = s.provision.From(discovery.SourceAdmin, e)
	}
	if err != nil {
		return messages.EngineState{}, marked{err, admin.ErrInvalidEngine}
	}
	if err := s.admins.Add(e); err != nil {
		return messages.EngineState{}, sourceError(err)
	}
	s.log.Info("engine added through the admin API", "engine", e.Name, "url", e.URL, "role", string(e.Role))
	es, err := s.router.Engines(ctx)
	if err != nil {
		return messages.EngineState{}, err
	}
	for _, st := range es {
		if st.Name == e.Name && st.State != "removing" {
			return st, nil
		}
	}
	return messages.EngineState{}, fmt.Errorf("engine %s was added but is not in the fleet (see /discovery)", e.Name)
}

// removeEngine removes an engine the admin API added.
func (s *Server) removeEngine(name string) error {
	if err := s.admins.Remove(name); err != nil {
		return sourceError(err)
	}
	s.log.Info("engine removed through the admin API", "engine", name)
	return nil
}

// sourceError marks the admin source's refusals for the admin listener's status codes.
func sourceError(err error) error {
	switch {
	case errors.Is(err, discovery.ErrOwnedElsewhere):
		return marked{err, admin.ErrConflict}
	case errors.Is(err, discovery.ErrNotAdded):
		return marked{err, admin.ErrUnknownEngine}
	}
	return err
}

// DiscoveryStatus is what /discovery shows: every source's state, and the last reload's.
type DiscoveryStatus struct {
	discovery.Status
	Reload *ReloadStatus `json:"reload,omitempty"`
}

// Discovery reports the sources and the last reload.
func (s *Server) Discovery() DiscoveryStatus {
	s.reloadMu.Lock()
	defer s.reloadMu.Unlock()
	st := DiscoveryStatus{Status: s.catalog.Status()}
	if s.reload != nil {
		r := *s.reload
		st.Reload = &r
	}
	return st
}
