// Package peer is the benchmark's peer arm: a prefill/decode proxy written the way a Go user
// would write one in an afternoon — the standard library's net/http server and client,
// encoding/json into maps, the decode body streamed back with a flush after every read. It
// does no validation, has no timeouts, retries, breakers or actors: it is what Narwhal's CPU
// per request and per token is compared with in the same run (issue #17), not a product.
//
// `bench peer -listen ADDR -engines JSON` runs it as its own process so the harness can
// sample its CPU exactly as it samples the router's.
package peer

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"strconv"
	"sync/atomic"
	"time"
)

// Engine is one engine of the fleet, as the peer needs it.
type Engine struct {
	Role string `json:"role"` // prefill, decode or both
	URL  string `json:"url"`
}

// Proxy is the peer's HTTP handler.
type Proxy struct {
	prefill, decode []string
	next            atomic.Uint64
	client          *http.Client
}

// New builds a proxy over the fleet's engines.
func New(engines []Engine) (*Proxy, error) {
	p := &Proxy{client: &http.Client{Transport: &http.Transport{
		MaxIdleConns:        4096,
		MaxIdleConnsPerHost: 4096,
		IdleConnTimeout:     90 * time.Second,
	}}}
	for _, e := range engines {
		switch e.Role {
		case "prefill":
			p.prefill = append(p.prefill, e.URL)
		case "decode":
			p.decode = append(p.decode, e.URL)
		default:
			p.prefill = append(p.prefill, e.URL)
			p.decode = append(p.decode, e.URL)
		}
	}
	if len(p.prefill) == 0 || len(p.decode) == 0 {
		return nil, errors.New("peer: the fleet needs a prefill and a decode engine")
	}
	return p, nil
}

// ServeHTTP runs one chat request: prefill with one token and do_remote_decode, then decode
// with the producer's kv_transfer_params, streamed back as it arrives.
func (p *Proxy) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	var body map[string]any
	if err := json.NewDecoder(r.Body).Decode(&body); err != nil {
		http.Error(w, err.Error(), http.StatusBadRequest)
		return
	}
	n := p.next.Add(1)
	prefillURL := p.prefill[n%uint64(len(p.prefill))] + r.URL.Path
	decodeURL := p.decode[n%uint64(len(p.decode))] + r.URL.Path
	id := "peer-" + strconv.FormatUint(n, 10)

	pre := make(map[string]any, len(body)+2)
	for k, v := range body {
		pre[k] = v
	}
	pre["max_tokens"] = 1
	pre["stream"] = false
	delete(pre, "stream_options")
	pre["kv_transfer_params"] = map[string]any{"do_remote_decode": true, "do_remote_prefill": false}
	var prefilled struct {
		KV json.RawMessage `json:"kv_transfer_params"`
	}
	if status, err := p.post(r, prefillURL, id, pre, func(resp *http.Response) error {
		return json.NewDecoder(resp.Body).Decode(&prefilled)
	}); err != nil {
		http.Error(w, "prefill: "+err.Error(), status)
		return
	}

	body["stream"] = true
	body["stream_options"] = map[string]any{"include_usage": true}
	body["kv_transfer_params"] = prefilled.KV
	status, err := p.post(r, decodeURL, id, body, func(resp *http.Response) error {
		w.Header().Set("Content-Type", resp.Header.Get("Content-Type"))
		w.WriteHeader(resp.StatusCode)
		flusher, _ := w.(http.Flusher)
		buf := make([]byte, 32<<10)
		for {
			n, err := resp.Body.Read(buf)
			if n > 0 {
				if _, werr := w.Write(buf[:n]); werr != nil {
					return nil // the client left; closing the body drops the engine connection
				}
				if flusher != nil {
					flusher.Flush()
				}
			}
			if errors.Is(err, io.EOF) {
				return nil
			}
			if err != nil {
				return nil // headers are out: all the peer can do is end the stream
			}
		}
	})
	if err != nil {
		http.Error(w, "decode: "+err.Error(), status)
	}
}

// post sends body as JSON and hands a 200 response to read; any other status is an error.
func (p *Proxy) post(r *http.Request, url, id string, body map[string]any, read func(*http.Response) error) (int, error) {
	b, err := json.Marshal(body)
	if err != nil {
		return http.StatusBadRequest, err
	}
	req, err := http.NewRequestWithContext(r.Context(), http.MethodPost, url, bytes.NewReader(b))
	if err != nil {
		return http.StatusInternalServerError, err
	}
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("X-Request-Id", id)
	resp, err := p.client.Do(req)
	if err != nil {
		return http.StatusBadGateway, err
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		msg, _ := io.ReadAll(io.LimitReader(resp.Body, 4096))
		return resp.StatusCode, fmt.Errorf("engine status %d: %s", resp.StatusCode, msg)
	}
	return http.StatusOK, read(resp)
}

// Serve listens on addr and serves until the listener fails; ready, if not nil, is called
// with the bound address once the socket listens.
func Serve(addr string, engines []Engine, ready func(addr string)) error {
	p, err := New(engines)
	if err != nil {
		return err
	}
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		return err
	}
	if ready != nil {
		ready(ln.Addr().String())
	}
	return http.Serve(ln, p)
}
