package transport

import (
	"context"
	"log/slog"
	"net/netip"
	"sync"
	"time"
)

// Resolver looks a host name up. *net.Resolver is one (net.DefaultResolver: the system's);
// tests give a real DNS server's or a table.
type Resolver interface {
	LookupNetIP(ctx context.Context, network, host string) ([]netip.Addr, error)
}

// How the provisioner's loop check resolves the host names engines are given by (hostNames).
const (
	// NameLookupTimeout bounds one lookup.
	NameLookupTimeout = time.Second
	// NameWaitBudget is how long provisioning waits on lookups in all per NameWaitWindow: past
	// it, a name not cached is taken unresolved (its lookup goes on, for the next time), so a
	// registrant writing thousands of names on a silent DNS delays its source by seconds, not
	// by a second a name.
	NameWaitBudget = 2 * time.Second
	NameWaitWindow = 10 * time.Second
	// nameResolvedFor and nameFailedFor are how long an answer, and a failure, is kept before
	// the name is looked up again.
	nameResolvedFor = 30 * time.Second
	nameFailedFor   = 5 * time.Second
	// maxNameLookups bounds the lookups in flight; maxNames the names cached.
	maxNameLookups = 16
	maxNames       = 4096
)

// hostNames resolves the host names engines are given by, for the loop check (checkOwn): an
// engine whose name resolves to an address of this host, at one of the router's listener
// ports, is refused like one given by that address. Every lookup is bounded (timeout, wait
// budget, lookups in flight), and answers and failures are cached per name. A name that does not
// resolve is not refused (a DNS outage must not empty the fleet): it is logged, looked up again
// once its failure expires, and the hop marker (HopHeader) still ends any loop it makes. Shared
// by every copy of the Provisioner, like ownListeners.
type hostNames struct {
	mu       sync.Mutex
	resolver Resolver // nil: names are not looked up
	log      *slog.Logger
	timeout  time.Duration // NameLookupTimeout
	budget   time.Duration // NameWaitBudget
	now      func() time.Time
	names    map[string]*nameEntry
	inflight int
	// window is when the current wait window began; waited what provisioning waited in it.
	window time.Time
	waited time.Duration
}

// nameEntry is one name's last answer (addrs, or err), kept until expires; done is open while a
// lookup is in flight.
type nameEntry struct {
	addrs   []netip.Addr
	err     error
	expires time.Time
	done    chan struct{}
}

func newHostNames() *hostNames {
	return &hostNames{timeout: NameLookupTimeout, budget: NameWaitBudget, now: time.Now, names: map[string]*nameEntry{}}
}

// use sets the resolver and the logger lookup failures are written to (nil: none).
func (h *hostNames) use(r Resolver, log *slog.Logger) {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.resolver, h.log = r, log
	clear(h.names)
}

// addrs returns the addresses name resolves to, and whether it resolved (within the bounds).
func (h *hostNames) addrs(name string) ([]netip.Addr, bool) {
	h.mu.Lock()
	if h.resolver == nil {
		h.mu.Unlock()
		return nil, false
	}
	now := h.now()
	e := h.names[name]
	if e != nil && e.done == nil && now.Before(e.expires) {
		h.mu.Unlock()
		return e.addrs, e.err == nil
	}
	if e == nil || e.done == nil {
		if h.inflight >= maxNameLookups {
			h.mu.Unlock()
			return nil, false
		}
		e = h.start(name)
	}
	if now.Sub(h.window) >= NameWaitWindow {
		h.window, h.waited = now, 0
	}
	wait := min(h.timeout, h.budget-h.waited)
	done := e.done
	h.mu.Unlock()
	if wait <= 0 {
		return nil, false
	}
	t := time.NewTimer(wait)
	defer t.Stop()
	began := time.Now()
	select {
	case <-done:
	case <-t.C:
	}
	h.mu.Lock()
	defer h.mu.Unlock()
	h.waited += time.Since(began)
	if e.done != nil {
		return nil, false
	}
	return e.addrs, e.err == nil
}

// start looks name up in the background; the caller holds mu.
func (h *hostNames) start(name string) *nameEntry {
	if len(h.names) >= maxNames {
		now := h.now()
		for n, x := range h.names {
			if x.done == nil && !now.Before(x.expires) {
				delete(h.names, n)
			}
		}
		if len(h.names) >= maxNames {
			for n, x := range h.names {
				if x.done == nil {
					delete(h.names, n)
				}
			}
		}
	}
	e := &nameEntry{done: make(chan struct{})}
	h.names[name] = e
	h.inflight++
	r, timeout, log := h.resolver, h.timeout, h.log
	go func() {
		ctx, cancel := context.WithTimeout(context.Background(), timeout)
		addrs, err := r.LookupNetIP(ctx, "ip", name)
		cancel()
		h.mu.Lock()
		defer h.mu.Unlock()
		h.inflight--
		e.addrs, e.err, e.expires = addrs, err, h.now().Add(nameResolvedFor)
		if err != nil {
			e.expires = h.now().Add(nameFailedFor)
			if log != nil {
				log.Warn("engine host name not resolved: its loop check is left to the hop marker until it resolves",
					"host", name, "error", err.Error())
			}
		}
		close(e.done)
		e.done = nil
	}()
	return e
}
