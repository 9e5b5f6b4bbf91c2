package sim

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"strings"
	"sync"
	"time"

	json "github.com/goccy/go-json"
)

// Mooncake mode: the engine serves vLLM's MooncakeConnector beside NIXL, whichever shape a
// request's kv_transfer_params take. The shapes and failures follow vLLM's
// vllm/distributed/kv_transfer/kv_connector/v1/mooncake/mooncake_connector.py and the
// bootstrap server in mooncake_utils.py beside it:
//
//   - The producer's bootstrap server answers GET /query with one entry per data-parallel
//     rank: {"0": {"engine_id": …, "worker_addr": {"0": {"0": "tcp://host:port"}}, "tp_size":
//     1, "pp_size": 1}}. The simulator serves it on its KV listener, which is also the
//     rank's one worker.
//   - A prefill leg with a transfer_id ({"do_remote_decode": true, "transfer_id": …})
//     computes the prompt and keeps its blocks registered under the transfer id; its answer
//     carries no kv_transfer_params (the decode was planned with everything it needs).
//   - A decode leg with {"do_remote_prefill": true, "transfer_id", "remote_bootstrap_addr",
//     "remote_engine_id"} asks the bootstrap server for the workers of remote_engine_id and
//     pulls the blocks registered under transfer_id from them, the producer waiting for its
//     prefill if that has not finished.
//
// How it fails is vLLM's: a bootstrap server that does not answer, or that lists no engine
// with remote_engine_id (a producer that restarted has new ids), is logged by vLLM and the
// request then waits for KV that never comes, until the abort timeout; a transfer id the
// producer never registers keeps the producer's sender waiting for it just as long. The
// simulator waits its block lease (Options.KVLease) in both cases, then fails the load as
// Options.KVLoadFailure says.

const (
	mooncakeQueryPath = "/query"
	mooncakePullPath  = "/mooncake/pull"
)

// mooncakeTransferID returns a leg's transfer_id, if its kv_transfer_params are Mooncake's.
func mooncakeTransferID(p map[string]json.RawMessage) (string, bool) {
	raw, ok := p["transfer_id"]
	if !ok {
		return "", false
	}
	var id string
	if json.Unmarshal(raw, &id) != nil || id == "" {
		return "", false
	}
	return id, true
}

// transferWaits wakes producers' pulls waiting for a transfer id when a prefill registers
// blocks. Its zero value is ready to use.
type transferWaits struct {
	mu sync.Mutex
	ch chan struct{}
}

// changed returns a channel closed at the next registration.
func (t *transferWaits) changed() <-chan struct{} {
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.ch == nil {
		t.ch = make(chan struct{})
	}
	return t.ch
}

// registered wakes every waiting pull.
func (t *transferWaits) registered() {
	t.mu.Lock()
	if t.ch != nil {
		close(t.ch)
		t.ch = nil
	}
	t.mu.Unlock()
}

// pinTransfer registers a Mooncake prefill's blocks under its transfer id.
func (e *Engine) pinTransfer(transferID string, promptTokens int, release func()) {
	e.blocks.pin(transferID, promptTokens, false, time.Now(), release)
	e.transfers.registered()
}

// bootstrapRank is one rank's entry in the bootstrap server's /query answer.
type bootstrapRank struct {
	EngineID   string                       `json:"engine_id"`
	WorkerAddr map[string]map[string]string `json:"worker_addr"`
	TPSize     int                          `json:"tp_size"`
	PPSize     int                          `json:"pp_size"`
}

func (e *Engine) serveBootstrapQuery(w http.ResponseWriter, _ *http.Request) {
	w.Header().Set("Content-Type", "application/json")
	b, _ := json.Marshal(map[string]bootstrapRank{"0": {
		EngineID:   e.EngineID(),
		WorkerAddr: map[string]map[string]string{"0": {"0": "tcp://" + e.kvEndpoint}},
		TPSize:     1, PPSize: 1,
	}})
	_, _ = w.Write(b)
}

type mooncakePull struct {
	TransferID string `json:"transfer_id"`
}

// serveMooncakePull is the producer's worker: it hands over the blocks registered under the
// transfer id, waiting for them up to the block lease.
func (e *Engine) serveMooncakePull(w http.ResponseWriter, r *http.Request) {
	reply := func(code int, resp kvReadResponse) { replyKV(w, code, resp) }
	var req mooncakePull
	err := readKVRequest(r, &req)
	if err != nil || req.TransferID == "" {
		reply(http.StatusBadRequest, kvReadResponse{Error: fmt.Sprintf("bad pull request: %v", err)})
		return
	}
	ctx, cancel := context.WithTimeout(r.Context(), e.opts.KVLease)
	defer cancel()
	for {
		changed := e.transfers.changed()
		n, err := e.blocks.takeTransfer(req.TransferID, time.Now())
		if err == nil {
			reply(http.StatusOK, kvReadResponse{Blocks: n})
			return
		}
		select {
		case <-changed:
		case <-ctx.Done():
			reply(http.StatusNotFound, kvReadResponse{Error: fmt.Sprintf("transfer id %q was never registered here within %s", req.TransferID, e.opts.KVLease)})
			return
		}
	}
}

// takeTransfer frees the blocks registered under a transfer id, whatever their ids: a
// Mooncake consumer names its own blocks, not the producer's.
func (t *blockTable) takeTransfer(transferID string, now time.Time) (int, error) {
	t.mu.Lock()
	p, ok := t.byReq[transferID]
	t.mu.Unlock()
	if !ok {
		return 0, errNoPinned
	}
	return t.take(transferID, p.groups, p.grouped, now)
}

// errTransferLost is a decode whose KV never came: vLLM waits its abort timeout for it.
var errTransferLost = errors.New("the KV of this transfer never arrived")

// pullMooncake is the consumer's side: find the producer's worker through its bootstrap
// server and pull the transfer's blocks. It returns how many blocks moved.
func (g *generation) pullMooncake(transferID string) (int, error) {
	var addr, engineID string
	for key, dst := range map[string]*string{"remote_bootstrap_addr": &addr, "remote_engine_id": &engineID} {
		if json.Unmarshal(g.req.kvParams[key], dst) != nil || *dst == "" {
			return 0, fmt.Errorf("kv_transfer_params.%s must be a non-empty string, got %s", key, g.req.kvParams[key])
		}
	}
	worker, err := g.e.findWorker(g.ctx, addr, engineID)
	if err != nil {
		return 0, g.waitLost(err)
	}
	n, err := g.e.pullBlocks(g.ctx, worker, transferID)
	if err != nil {
		return 0, err
	}
	g.e.count.kvLoads.Add(1)
	return n, nil
}

// waitLost is vLLM's consumer after a bootstrap failure: it logged why, and the request waits
// for KV that never comes until the lease (vLLM: the abort timeout) ends, or the client leaves.
func (g *generation) waitLost(why error) error {
	if g.sleepUntil(time.Now().Add(g.e.opts.KVLease)) {
		return fmt.Errorf("%w: %w", errTransferLost, why)
	}
	return g.ctx.Err()
}

// findWorker asks the bootstrap server at addr (http://host:port) for engineID's worker.
func (e *Engine) findWorker(ctx context.Context, addr, engineID string) (string, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, strings.TrimSuffix(addr, "/")+mooncakeQueryPath, nil)
	if err != nil {
		return "", fmt.Errorf("bootstrap server %s: %w", addr, err)
	}
	resp, err := e.kvClient.Do(req)
	if err != nil {
		return "", fmt.Errorf("failed to connect to bootstrap server %s: %w", addr, err)
	}
	defer resp.Body.Close()
	var ranks map[string]bootstrapRank
	raw, err := io.ReadAll(io.LimitReader(resp.Body, 1<<20))
	if err == nil && resp.StatusCode == http.StatusOK {
		err = json.Unmarshal(raw, &ranks)
	} else if err == nil {
		err = fmt.Errorf("HTTP %d", resp.StatusCode)
	}
	if err != nil {
		return "", fmt.Errorf("failed to connect to bootstrap server %s: %w", addr, err)
	}
	for _, r := range ranks {
		if r.EngineID == engineID {
			if w := r.WorkerAddr["0"]["0"]; w != "" {
				return strings.TrimPrefix(w, "tcp://"), nil
			}
		}
	}
	return "", fmt.Errorf("failed to find remote engine_id %s from bootstrap server %s", engineID, addr)
}

// pullBlocks pulls the transfer's blocks from the producer's worker at host:port.
func (e *Engine) pullBlocks(ctx context.Context, worker, transferID string) (int, error) {
	body, _ := json.Marshal(mooncakePull{TransferID: transferID})
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, "http://"+worker+mooncakePullPath, strings.NewReader(string(body)))
	if err != nil {
		return 0, fmt.Errorf("mooncake pull from %s: %w", worker, err)
	}
	req.Header.Set("Content-Type", "application/json")
	// The producer may wait its whole lease for the prefill: no client timeout shorter than it.
	client := *e.kvClient
	client.Timeout = e.opts.KVLease + kvReadTimeout
	resp, err := client.Do(req)
	if err != nil {
		return 0, fmt.Errorf("mooncake pull from %s: %w", worker, err)
	}
	defer resp.Body.Close()
	raw, _ := io.ReadAll(io.LimitReader(resp.Body, 1<<20))
	var r kvReadResponse
	if err := json.Unmarshal(raw, &r); err != nil {
		return 0, fmt.Errorf("mooncake pull from %s: bad answer %q: %w", worker, raw, err)
	}
	if resp.StatusCode != http.StatusOK {
		return 0, fmt.Errorf("mooncake pull from %s: %s", worker, r.Error)
	}
	return r.Blocks, nil
}
