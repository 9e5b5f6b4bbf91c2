package node

import (
	"errors"
	"fmt"
	"slices"
	"strings"
	"time"
)

// ReloadStatus is the outcome of the last reload of the configuration file.
type ReloadStatus struct {
	At time.Time `json:"at"`
	// Result is "applied", "refused" (a setting that cannot change at run time changed: nothing
	// was applied) or "invalid" (the file did not parse or validate: nothing was applied).
	Result string `json:"result"`
	// Changed lists the keys the file changed; Refused those of them a running router cannot
	// change; Error says what was wrong.
	Changed []string `json:"changed,omitempty"`
	Refused []string `json:"refused,omitempty"`
	Error   string   `json:"error,omitempty"`
}

// ErrRefused is returned by Reload for a file that changes a setting fixed for the process's life.
var ErrRefused = errors.New("the reload changes settings that cannot change while Narwhal runs")

// Reload re-reads the configuration (load reads and provisions the file, as at start) and
// applies what may change at run time (config.Reloadable): the engine list through the file
// source, the other settings to requests that arrive from now on. A file that does not load,
// or that changes anything else, changes nothing: the error names what was wrong (each refused
// key by name), and /discovery and the config_reload metrics say so. Connections are never
// dropped.
func (s *Server) Reload(load func() (Runtime, error)) error {
	s.reloadMu.Lock()
	defer s.reloadMu.Unlock()
	st := &ReloadStatus{At: time.Now()}
	defer func() {
		s.reload = st
		s.reporting.Metrics.ConfigReload(st.Result)
	}()
	next, err := load()
	if err != nil {
		st.Result, st.Error = "invalid", err.Error()
		s.log.Error("configuration reload refused: the file is not valid; the running configuration is unchanged", "error", err.Error())
		return err
	}
	cur := s.Runtime()
	st.Changed, st.Refused = changes(cur, next)
	if len(st.Refused) > 0 {
		st.Result = "refused"
		st.Error = fmt.Sprintf("%s cannot change while Narwhal runs (restart it to change them); nothing was applied",
			strings.Join(st.Refused, ", "))
		s.log.Error("configuration reload refused: it changes settings that cannot change at run time; the running configuration is unchanged",
			"refused", st.Refused, "changed", st.Changed)
		return fmt.Errorf("%w: %s", ErrRefused, strings.Join(st.Refused, ", "))
	}
	st.Result = "applied"
	if len(st.Changed) == 0 {
		s.log.Info("configuration reloaded: nothing changed")
		return nil
	}
	s.cur.Store(&next)
	s.router.Reconfigure(next.Config)
	s.ingress.Reconfigure(next.Config.Server, next.APIKeys, next.Config.Request)
	s.ingress.SetFlowControl(next.Config.FlowControl)
	if s.logLevel != nil {
		s.logLevel.Set(next.Config.Log.SlogLevel())
	}
	if slices.Contains(st.Changed, "engines") {
		s.file.Set(next.Config.FileEngines())
	}
	s.log.Info("configuration reloaded", "changed", st.Changed)
	return nil
}
