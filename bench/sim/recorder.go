package sim

import (
	"bytes"
	"maps"
	"net/http"
	"sync"
	"time"
)

// recordLimit is how many requests an engine remembers for tests.
const recordLimit = 1024

// RecordedRequest is one request an engine received on its API listener (the /sim/
// admin endpoints excepted).
type RecordedRequest struct {
	// Leg is "prefill", "decode", or "other" for everything that is not a valid
	// generation.
	Leg  string `json:"leg"`
	Path string `json:"path"`
	// Header holds the first value of every request header under its canonical name
	// ("X-Request-Id", "Traceparent"); use Get for a case-insensitive lookup.
	Header map[string]string `json:"header"`
	// Body is a copy of the raw request body.
	Body []byte    `json:"body"`
	At   time.Time `json:"at"`
	// Response is the body of a non-streaming 200 answer (a prefill leg's descriptor
	// included); empty for streams and errors.
	Response []byte `json:"response,omitempty"`

	seq uint64
}

// Get returns the header named name, whatever its case.
func (r RecordedRequest) Get(name string) string { return r.Header[http.CanonicalHeaderKey(name)] }

// recorder keeps the last recordLimit requests in a ring.
type recorder struct {
	mu      sync.Mutex
	ring    []RecordedRequest
	next    int // index of the oldest entry once the ring is full
	lastSeq uint64
}

// add keeps rec and returns its sequence number, for respond.
func (r *recorder) add(rec RecordedRequest) uint64 {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.lastSeq++
	rec.seq = r.lastSeq
	if len(r.ring) < recordLimit {
		r.ring = append(r.ring, rec)
		return rec.seq
	}
	r.ring[r.next] = rec
	r.next = (r.next + 1) % recordLimit
	return rec.seq
}

// respond attaches a response body to the record seq, if it is still kept.
func (r *recorder) respond(seq uint64, body []byte) {
	r.mu.Lock()
	defer r.mu.Unlock()
	for i := range r.ring {
		if r.ring[i].seq == seq {
			r.ring[i].Response = bytes.Clone(body)
			return
		}
	}
}

// list returns the records oldest first, as deep copies.
func (r *recorder) list() []RecordedRequest {
	r.mu.Lock()
	defer r.mu.Unlock()
	out := make([]RecordedRequest, 0, len(r.ring))
	out = append(out, r.ring[r.next:]...)
	out = append(out, r.ring[:r.next]...)
	for i := range out {
		out[i].Body = bytes.Clone(out[i].Body)
		out[i].Response = bytes.Clone(out[i].Response)
		out[i].Header = maps.Clone(out[i].Header)
	}
	return out
}

func (r *recorder) reset() {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.ring, r.next = nil, 0
}

// newRecord describes req; the record keeps body, which nobody may modify afterwards.
func newRecord(l leg, req *http.Request, body []byte, at time.Time) RecordedRequest {
	h := make(map[string]string, len(req.Header))
	for k, v := range req.Header {
		if len(v) > 0 {
			h[k] = v[0]
		}
	}
	if req.Host != "" {
		h["Host"] = req.Host
	}
	return RecordedRequest{Leg: l.String(), Path: req.URL.Path, Header: h, Body: body, At: at}
}
