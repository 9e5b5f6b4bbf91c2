package kv

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"strconv"
	"sync"
	"time"
	"unicode"

	json "github.com/goccy/go-json"
)

// A Mooncake producer's bootstrap server (vLLM's MooncakeBootstrapServer, mooncake_utils.py)
// answers GET /query with one entry per data-parallel rank, keyed by the rank:
//
//	{"0": {"engine_id": "…", "worker_addr": {"0": {"0": "…"}}, "tp_size": 1, "pp_size": 1}, "1": …}
//
// The router reads the engine_id of each rank and nothing else. vLLM's proxy asks once at start
// and never again; the router asks when it first plans an attempt through the producer, keeps
// the answer for bootstrapMaxAge, and asks again at once after an attempt through the producer
// failed (Forget): a producer that restarted has new engine ids, and consumers handed the old
// ones cannot find its workers.

// Bounds of a bootstrap query. The answer is a few hundred bytes per rank.
const (
	bootstrapTimeout  = 3 * time.Second
	bootstrapMaxBytes = 256 << 10
	bootstrapMaxRanks = 1024
	bootstrapMaxAge   = time.Minute
	maxEngineIDBytes  = 256
	bootstrapEntries  = 4096 // producers remembered; past this the cache starts over
)

// errBootstrap marks a bootstrap server that could not be asked or answered nonsense.
var errBootstrap = errors.New("mooncake bootstrap query failed")

// bootstrapCache holds each bootstrap address's engine ids (index: data-parallel rank). One
// query runs per address at a time; attempts planned meanwhile wait for its answer.
type bootstrapCache struct {
	client *http.Client
	now    func() time.Time

	mu      sync.Mutex
	entries map[string]*bootstrapEntry
}

type bootstrapEntry struct {
	done    chan struct{} // closed when the query ends
	ids     []string
	err     error
	fetched time.Time
}

func newBootstrapCache() *bootstrapCache {
	return &bootstrapCache{
		client: &http.Client{
			Timeout: bootstrapTimeout,
			Transport: &http.Transport{
				Proxy:               nil, // a producer's address, never through an environment proxy
				DialContext:         (&net.Dialer{Timeout: bootstrapTimeout}).DialContext,
				MaxIdleConnsPerHost: 1,
				IdleConnTimeout:     30 * time.Second,
			},
			CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse },
		},
		now:     time.Now,
		entries: make(map[string]*bootstrapEntry),
	}
}

// cached returns addr's engine ids if a query already answered them.
func (c *bootstrapCache) cached(addr string) ([]string, bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	e, ok := c.entries[addr]
	if !ok {
		return nil, false
	}
	select {
	case <-e.done:
		return e.ids, e.err == nil
	default:
		return nil, false
	}
}

// get returns addr's engine ids, asking its bootstrap server when they are not known, too old
// or were forgotten. A failed query is not kept: the next attempt asks again.
func (c *bootstrapCache) get(ctx context.Context, addr string) ([]string, error) {
	c.mu.Lock()
	e, ok := c.entries[addr]
	if ok {
		select {
		case <-e.done:
			if e.err != nil || c.now().Sub(e.fetched) > bootstrapMaxAge {
				ok = false
			}
		default:
		}
	}
	if !ok {
		if len(c.entries) >= bootstrapEntries {
			clear(c.entries)
		}
		e = &bootstrapEntry{done: make(chan struct{})}
		c.entries[addr] = e
		c.mu.Unlock()
		// The query is the entry's, not this attempt's: an attempt that gives up does not
		// fail the others waiting for the answer.
		e.ids, e.err = c.query(context.WithoutCancel(ctx), addr)
		e.fetched = c.now()
		close(e.done)
		if e.err != nil {
			c.forgetEntry(addr, e)
		}
	} else {
		c.mu.Unlock()
	}
	select {
	case <-e.done:
		return e.ids, e.err
	case <-ctx.Done():
		return nil, fmt.Errorf("waiting for the mooncake bootstrap server at %s: %w", addr, ctx.Err())
	}
}

// forget drops addr's answer.
func (c *bootstrapCache) forget(addr string) {
	c.mu.Lock()
	if e, ok := c.entries[addr]; ok {
		select {
		case <-e.done:
			delete(c.entries, addr)
		default: // a query under way will answer afresh anyway
		}
	}
	c.mu.Unlock()
}

func (c *bootstrapCache) forgetEntry(addr string, e *bootstrapEntry) {
	c.mu.Lock()
	if c.entries[addr] == e {
		delete(c.entries, addr)
	}
	c.mu.Unlock()
}

// query asks the bootstrap server at addr (host:port, already held to the endpoint policy).
func (c *bootstrapCache) query(ctx context.Context, addr string) ([]string, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, "http://"+addr+"/query", nil)
	if err != nil {
		return nil, fmt.Errorf("%w: %s: %w", errBootstrap, addr, err)
	}
	resp, err := c.client.Do(req)
	if err != nil {
		return nil, fmt.Errorf("%w: %s: %w", errBootstrap, addr, err)
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(io.LimitReader(resp.Body, bootstrapMaxBytes+1))
	if err != nil {
		return nil, fmt.Errorf("%w: %s: reading the answer: %w", errBootstrap, addr, err)
	}
	if resp.StatusCode != http.StatusOK {
		return nil, fmt.Errorf("%w: %s answered HTTP %d", errBootstrap, addr, resp.StatusCode)
	}
	if len(body) > bootstrapMaxBytes {
		return nil, fmt.Errorf("%w: %s answered more than %d bytes", errBootstrap, addr, bootstrapMaxBytes)
	}
	ids, err := parseBootstrap(body)
	if err != nil {
		return nil, fmt.Errorf("%w: %s: %w", errBootstrap, addr, err)
	}
	return ids, nil
}

// parseBootstrap reads a /query answer into the engine id of each rank, rank 0 first. The
// ranks must be 0..N-1, each with a non-empty printable engine id.
func parseBootstrap(body []byte) ([]string, error) {
	var ranks map[string]struct {
		EngineID string `json:"engine_id"`
	}
	if err := json.Unmarshal(body, &ranks); err != nil {
		return nil, fmt.Errorf("the answer is not an object of data-parallel ranks: %w", err)
	}
	if len(ranks) == 0 {
		return nil, errors.New("no data-parallel rank has registered yet")
	}
	if len(ranks) > bootstrapMaxRanks {
		return nil, fmt.Errorf("%d ranks, more than %d", len(ranks), bootstrapMaxRanks)
	}
	ids := make([]string, len(ranks))
	for k, v := range ranks {
		rank, err := strconv.Atoi(k)
		if err != nil || rank < 0 || rank >= len(ranks) || strconv.Itoa(rank) != k {
			return nil, fmt.Errorf("rank %q is not one of 0..%d", k, len(ranks)-1)
		}
		if !printableID(v.EngineID) {
			return nil, fmt.Errorf("rank %d has no usable engine_id", rank)
		}
		ids[rank] = v.EngineID
	}
	return ids, nil
}

func printableID(s string) bool {
	if s == "" || len(s) > maxEngineIDBytes {
		return false
	}
	for _, r := range s {
		if !unicode.IsPrint(r) {
			return false
		}
	}
	return true
}
