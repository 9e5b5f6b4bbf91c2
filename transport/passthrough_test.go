package transport_test

import (
	"bytes"
	"context"
	"errors"
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"

	"github.com/narwhal-router/narwhal/config"
	"github.com/narwhal-router/narwhal/transport"
	"github.com/narwhal-router/narwhal/transport/fault"
	"github.com/narwhal-router/narwhal/transport/wire"
)

// TestPassthroughAnswerIsBoundedByMaxResponseBytes: a passthrough answer up to the configured
// bound (server.max_response_bytes, which node.Start copies into the engine section) reaches the
// caller byte for byte; one byte more is a response_too_large fault that names the key and its
// value, whether the engine announced the length or sent it chunked. The fault is the operator's
// bound, not the engine's failure: neither retried nor counted against the engine.
func TestPassthroughAnswerIsBoundedByMaxResponseBytes(t *testing.T) {
	const limit = 4096
	// The engine answers as many bytes as the request ID says: "<framing>-<bytes>".
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		framing, size, _ := strings.Cut(r.Header.Get("X-Request-Id"), "-")
		n, err := strconv.Atoi(size)
		if err != nil || r.URL.Path != "/v1/embeddings" {
			http.Error(w, "unexpected request", http.StatusBadRequest)
			return
		}
		w.Header().Set("Content-Type", "application/json")
		if framing == "length" {
			w.Header().Set("Content-Length", strconv.Itoa(n))
		}
		w.Write(bytes.Repeat([]byte(" "), n))
	}))
	defer srv.Close()
	client := func(t *testing.T, maxResponse int) *transport.EngineClient {
		t.Helper()
		return transport.ClientFor(t, config.Engine{Name: "e0", URL: srv.URL, Role: config.RoleDecode},
			func(cfg *config.Config) { cfg.Server.MaxResponseBytes = maxResponse })
	}
	body, err := wire.ParsePassthroughBody(wire.EndpointEmbeddings, []byte(`{"model":"m","input":"hi"}`), "")
	if err != nil {
		t.Fatal(err)
	}
	ask := func(c *transport.EngineClient, framing string, n int) (transport.PassthroughResponse, error) {
		return c.Passthrough(context.Background(), &transport.Request{Body: body, BackendRequestID: framing + "-" + strconv.Itoa(n)})
	}

	bounded := client(t, limit)
	for _, framing := range []string{"length", "chunked"} {
		resp, err := ask(bounded, framing, limit)
		if err != nil || answerLen(resp) != limit {
			t.Fatalf("%s answer of exactly server.max_response_bytes: %d bytes, %v", framing, answerLen(resp), err)
		}
		_, err = ask(bounded, framing, limit+1)
		var f *fault.Fault
		if !errors.As(err, &f) {
			t.Fatalf("%s answer one byte over the bound: %v, want a fault", framing, err)
		}
		if f.Kind != fault.ResponseTooLarge || f.Phase != fault.PhaseDecode || f.Engine != "e0" ||
			!strings.Contains(f.Detail, "larger than server.max_response_bytes (4096 bytes)") {
			t.Fatalf("%s answer one byte over the bound: %s fault in %s on %s: %q, want response_too_large naming server.max_response_bytes (4096 bytes)",
				framing, f.Kind, f.Phase, f.Engine, f.Detail)
		}
		if f.Retriable() || f.CountsAgainstEngine() || f.ClientStatus() != 502 {
			t.Fatalf("%s answer one byte over the bound: retriable %v, counted %v, client status %d; want a 502 neither retried nor counted",
				framing, f.Retriable(), f.CountsAgainstEngine(), f.ClientStatus())
		}
		// The client stays usable: the oversized answer's connection was not pooled half read.
		if resp, err := ask(bounded, framing, 10); err != nil || answerLen(resp) != 10 {
			t.Fatalf("%s answer after an oversized one: %d bytes, %v", framing, answerLen(resp), err)
		}
	}
	// The bound is the configured one, not a fixed one: a larger bound admits the same answer.
	if resp, err := ask(client(t, 2*limit), "chunked", limit+1); err != nil || answerLen(resp) != limit+1 {
		t.Fatalf("with a bound of %d: %d bytes, %v", 2*limit, answerLen(resp), err)
	}
}

func answerLen(r transport.PassthroughResponse) int {
	n := 0
	for _, c := range r.Body {
		n += len(c)
	}
	return n
}

// Engines are asked for no compression; an answer compressed anyway, or a passthrough answer
// that is not JSON (an HTML error page behind a 200), is a bad_response, never relayed
// (issue 26, item 7).
func TestEngineAnswersMustBeIdentityAndJSON(t *testing.T) {
	var acceptEncoding atomic.Value
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		acceptEncoding.Store(r.Header.Get("Accept-Encoding"))
		switch r.Header.Get("X-Request-Id") {
		case "gzip":
			w.Header().Set("Content-Type", "application/json")
			w.Header().Set("Content-Encoding", "gzip")
			w.Write([]byte("\x1f\x8b\x08\x00junk"))
		case "html":
			w.Header().Set("Content-Type", "text/html; charset=utf-8")
			w.Write([]byte("<html>proxy error</html>"))
		default:
			w.Header().Set("Content-Type", "application/json; charset=utf-8")
			w.Write([]byte(`{"data":[]}`))
		}
	}))
	defer srv.Close()
	c := transport.ClientFor(t, config.Engine{Name: "e0", URL: srv.URL, Role: config.RoleDecode}, nil)
	body, err := wire.ParsePassthroughBody(wire.EndpointEmbeddings, []byte(`{"model":"m","input":"hi"}`), "")
	if err != nil {
		t.Fatal(err)
	}
	for id, want := range map[string]string{"gzip": `Content-Encoding "gzip"`, "html": `"text/html; charset=utf-8", not application/json`} {
		_, err := c.Passthrough(context.Background(), &transport.Request{Body: body, BackendRequestID: id})
		var f *fault.Fault
		if !errors.As(err, &f) || f.Kind != fault.BadResponse || !strings.Contains(f.Detail, want) || f.ClientStatus() != 502 {
			t.Fatalf("%s: %v, want a bad_response naming %s", id, err, want)
		}
	}
	resp, err := c.Passthrough(context.Background(), &transport.Request{Body: body, BackendRequestID: "ok"})
	if err != nil || resp.ContentType != "application/json; charset=utf-8" || answerLen(resp) != len(`{"data":[]}`) {
		t.Fatalf("a JSON answer: %+v, %v", resp, err)
	}
	if got := acceptEncoding.Load(); got != "identity" {
		t.Fatalf("the engine was asked with Accept-Encoding %q, want identity", got)
	}
}
