package telemetry

import (
	"io"

	"github.com/uber-go/tally/v4"
)

// An engine's instruments are kept apart from the others, per engine name, so that an engine
// that leaves the fleet takes them with it: Kubernetes names engines by pod, and a fleet that
// rolls daily brings new names without end.

// engineSet is one engine's instruments, and the tally scopes they were made in.
type engineSet struct {
	counters map[instrumentKey]tally.Counter
	gauges   map[instrumentKey]tally.Gauge
	timers   map[instrumentKey]tally.Timer
	scopes   []tally.Scope
}

// ForgetEngine drops the series of an engine that left the fleet (every counter and gauge
// tagged with its name as engine or producer): Prometheus no longer exports them, and statsd is
// sent nothing more for them, until RememberEngine. Its instruments are released too: they leave
// the caches, and their tally scopes are closed, which tally reports a last time and then drops
// at its next report. An engine name seen once therefore costs nothing once the engine is gone
// (Kubernetes names engines by pod, so a rolling cluster brings new names without end). Were
// the engine to be recorded again, its instruments are made afresh, starting at 0.
func (m *Metrics) ForgetEngine(engine string) {
	if m.engines != nil {
		m.engines.forget(engine)
	}
	m.mu.Lock()
	set := m.byEngine[engine]
	delete(m.byEngine, engine)
	m.mu.Unlock()
	if set == nil {
		return
	}
	for _, scope := range set.scopes {
		if c, ok := scope.(io.Closer); ok {
			_ = c.Close() // closing a scope twice (instruments sharing tags) is a no-op
		}
	}
}

// RememberEngine undoes ForgetEngine for an engine (re)joining the fleet under that name.
func (m *Metrics) RememberEngine(engine string) {
	if m.engines != nil {
		m.engines.remember(engine)
	}
}

// engineOf is the engine an instrument's tags name (as engine or producer), or "".
func engineOf(kv []string) string {
	for i := 0; i+1 < len(kv); i += 2 {
		if kv[i] == "engine" || kv[i] == "producer" {
			return kv[i+1]
		}
	}
	return ""
}

// engineCached is cached for an instrument of engine: kept in the engine's set (pick chooses
// the map); the tally scope mk made it in, if any, is noted there for ForgetEngine.
func engineCached[V any](m *Metrics, engine string, pick func(*engineSet) map[instrumentKey]V, k instrumentKey, mk func() (V, tally.Scope)) V {
	m.mu.RLock()
	if set := m.byEngine[engine]; set != nil {
		if v, ok := pick(set)[k]; ok {
			m.mu.RUnlock()
			return v
		}
	}
	m.mu.RUnlock()
	m.mu.Lock()
	defer m.mu.Unlock()
	set := m.byEngine[engine]
	if set == nil {
		set = &engineSet{counters: map[instrumentKey]tally.Counter{}, gauges: map[instrumentKey]tally.Gauge{}, timers: map[instrumentKey]tally.Timer{}}
		m.byEngine[engine] = set
	}
	if v, ok := pick(set)[k]; ok {
		return v
	}
	v, scope := mk()
	if scope != nil {
		set.scopes = append(set.scopes, scope)
	}
	pick(set)[k] = v
	return v
}
