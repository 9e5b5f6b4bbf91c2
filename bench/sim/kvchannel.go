package sim

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"strconv"
	"time"

	json "github.com/goccy/go-json"
)

// The KV side channel stands in for NIXL's transfer between engines. A consumer
// "reads" a handoff's blocks with
//
//	POST http://<remote_host>:<remote_port>/kv/read
//	{"engine_id": <remote_engine_id>, "request_id": <remote_request_id>, "block_ids": <remote_block_ids>}
//
// and the producer answers 200 {"blocks": N} after freeing them, or an error
// {"error": "..."} when the engine id is not its current identity (404), nothing is
// pinned under the request id (404) or the block ids differ (409).

const kvReadPath = "/kv/read"

// kvReadTimeout bounds one read, so a side channel that accepts and never answers
// cannot hold a decode forever.
const kvReadTimeout = 10 * time.Second

type kvReadRequest struct {
	EngineID  string          `json:"engine_id"`
	RequestID string          `json:"request_id"`
	BlockIDs  json.RawMessage `json:"block_ids"`
}

type kvReadResponse struct {
	Blocks int    `json:"blocks,omitempty"`
	Error  string `json:"error,omitempty"`
}

func newKVClient() *http.Client {
	return &http.Client{
		Timeout: kvReadTimeout,
		Transport: &http.Transport{
			Proxy:               nil, // loopback only; never an environment proxy
			DialContext:         (&net.Dialer{Timeout: 2 * time.Second}).DialContext,
			MaxIdleConnsPerHost: 32,
			IdleConnTimeout:     30 * time.Second,
		},
	}
}

// kvRoutes serves the producer side of the channel.
func (e *Engine) kvRoutes() http.Handler {
	mux := http.NewServeMux()
	mux.HandleFunc("POST "+kvReadPath, e.serveKVRead)
	mux.HandleFunc("GET "+kvHandshakePath, e.serveKVHandshake)
	mux.HandleFunc("GET "+mooncakeQueryPath, e.serveBootstrapQuery) // mooncake.go
	mux.HandleFunc("POST "+mooncakePullPath, e.serveMooncakePull)
	return mux
}

func (e *Engine) serveKVRead(w http.ResponseWriter, r *http.Request) {
	reply := func(code int, resp kvReadResponse) { replyKV(w, code, resp) }
	var req kvReadRequest
	err := readKVRequest(r, &req)
	if err != nil {
		reply(http.StatusBadRequest, kvReadResponse{Error: "bad read request: " + err.Error()})
		return
	}
	if req.EngineID != e.EngineID() {
		reply(http.StatusNotFound, kvReadResponse{Error: fmt.Sprintf("%v %q (this engine is %q)", errUnknownEngine, req.EngineID, e.EngineID())})
		return
	}
	groups, grouped, err := parseBlockIDs(req.BlockIDs)
	if err != nil {
		reply(http.StatusBadRequest, kvReadResponse{Error: err.Error()})
		return
	}
	n, err := e.blocks.take(req.RequestID, groups, grouped, time.Now())
	switch {
	case errors.Is(err, errNoPinned):
		reply(http.StatusNotFound, kvReadResponse{Error: fmt.Sprintf("%v: %q", err, req.RequestID)})
	case err != nil:
		reply(http.StatusConflict, kvReadResponse{Error: err.Error()})
	default:
		reply(http.StatusOK, kvReadResponse{Blocks: n})
	}
}

// replyKV writes a side-channel answer.
func replyKV(w http.ResponseWriter, code int, resp kvReadResponse) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(code)
	b, _ := json.Marshal(resp)
	_, _ = w.Write(b)
}

// readKVRequest decodes a side-channel request's JSON body (at most 1 MiB) into dst.
func readKVRequest(r *http.Request, dst any) error {
	body, err := io.ReadAll(io.LimitReader(r.Body, 1<<20))
	if err != nil {
		return err
	}
	return json.Unmarshal(body, dst)
}

// readRemoteBlocks is the consumer side: it reads h's blocks from the producer the
// descriptor names, over the side channel, and returns how many blocks it sent.
func (e *Engine) readRemoteBlocks(ctx context.Context, h handoff) (int, error) {
	addr := net.JoinHostPort(h.host, strconv.Itoa(h.port))
	if err := e.handshake(ctx, addr); err != nil {
		return 0, err
	}
	body, err := json.Marshal(kvReadRequest{EngineID: h.engineID, RequestID: h.requestID, BlockIDs: h.blocks})
	if err != nil {
		return 0, fmt.Errorf("encode KV read for %s: %w", addr, err)
	}
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, "http://"+addr+kvReadPath, bytes.NewReader(body))
	if err != nil {
		return 0, fmt.Errorf("KV read from %s: %w", addr, err)
	}
	req.Header.Set("Content-Type", "application/json")
	resp, err := e.kvClient.Do(req)
	if err != nil {
		return 0, fmt.Errorf("KV read from %s: %w", addr, err)
	}
	defer resp.Body.Close()
	raw, err := io.ReadAll(io.LimitReader(resp.Body, 1<<20))
	if err != nil {
		return 0, fmt.Errorf("KV read from %s: %w", addr, err)
	}
	if resp.StatusCode != http.StatusOK {
		var r kvReadResponse
		if json.Unmarshal(raw, &r) != nil || r.Error == "" {
			r.Error = fmt.Sprintf("not a KV side channel (HTTP %d)", resp.StatusCode)
		}
		return 0, fmt.Errorf("KV read from %s: %s", addr, r.Error)
	}
	var r kvReadResponse
	if err := json.Unmarshal(raw, &r); err != nil {
		return 0, fmt.Errorf("KV read from %s: bad answer %q: %w", addr, raw, err)
	}
	return r.Blocks, nil
}
