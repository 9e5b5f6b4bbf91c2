package kv

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"strconv"
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
// and never again. The router keeps each producer's answer (bootstrapcache.go) and asks again
// when it may be out of date: a producer that restarted has new engine ids, and a consumer
// handed an old one cannot find its workers and waits for KV that never comes.

// Bounds of a bootstrap query. The answer is a few hundred bytes per rank.
const (
	bootstrapTimeout  = 3 * time.Second
	bootstrapMaxBytes = 256 << 10
	bootstrapMaxRanks = 1024
	maxEngineIDBytes  = 256
)

// errBootstrap marks a bootstrap server that could not be asked or answered nonsense.
var errBootstrap = errors.New("mooncake bootstrap query failed")

// bootstrapClient asks producers' bootstrap servers, never through an environment proxy and
// never following a redirect.
func bootstrapClient() *http.Client {
	return &http.Client{
		Timeout: bootstrapTimeout,
		Transport: &http.Transport{
			Proxy:               nil, // a producer's address, never through an environment proxy
			DialContext:         (&net.Dialer{Timeout: bootstrapTimeout}).DialContext,
			MaxIdleConnsPerHost: 1,
			IdleConnTimeout:     30 * time.Second,
		},
		CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse },
	}
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
