// Package admin is Narwhal's operator listener: health and readiness, engine breaker state,
// manual eject/readmit, engines added and removed at run time and the state of the fleet's
// sources, the live supervisor-tree dump, Prometheus metrics and pprof. It listens on loopback
// by default and, with server.admin_token set, requires that bearer token on every route but
// /healthz and /readyz (which orchestrators probe without credentials); without a token it keeps
// browsers out (guard.go).
package admin

import (
	"context"
	"errors"
	"io"
	"net/http"
	"net/http/pprof"
	"strings"
	"time"

	"github.com/goccy/go-json"

	"github.com/narwhal-router/narwhal/messages"
)

// Fleet is what the admin listener needs of the router. The composition root (node) adapts
// the actor router to it, so this package knows nothing of actors.
type Fleet interface {
	// Ready reports whether the router can take requests (every role the disaggregation policy
	// needs has an admitted engine, and it is not draining); reason says why not.
	Ready() (ready bool, reason string)
	// Engines returns every engine's snapshot.
	Engines(ctx context.Context) ([]messages.EngineState, error)
	// Eject and Readmit act on one engine and return its new state; for a name that is not
	// configured the error wraps ErrUnknownEngine.
	Eject(ctx context.Context, name, reason string) (string, error)
	Readmit(ctx context.Context, name string, force bool) (string, error)
	// Tree dumps the supervisor tree.
	Tree(ctx context.Context) (Tree, error)
	// ClusterStatus is what /cluster shows: this node's view of the other Narwhal nodes
	// (members, their last gossip, the shared verdicts); without a cluster the same shape, empty
	// ("enabled": false, no members, no verdicts).
	ClusterStatus() any
	// AddEngine adds (or replaces) an engine given in the configuration's shape (an item of
	// engines:, as JSON) through the admin source; the error wraps ErrInvalidEngine for a body
	// that is not a valid engine and ErrConflict for a name another source reports.
	AddEngine(ctx context.Context, body []byte) (messages.EngineState, error)
	// RemoveEngine removes an engine the admin API added; the error wraps ErrUnknownEngine
	// for a name it did not add and ErrConflict for one another source reports.
	RemoveEngine(ctx context.Context, name string) error
	// Discovery is what /discovery shows: each source's state, and the last reload's.
	Discovery() any
}

// Tree is a supervisor-tree dump: JSON as it marshals, or indented text.
type Tree interface {
	Text() string
}

// Errors a Fleet's answers wrap.
var (
	// ErrUnknownEngine: an engine name that is not in the fleet (for RemoveEngine: that the
	// admin API did not add).
	ErrUnknownEngine = errors.New("no such engine")
	// ErrInvalidEngine: a body that is not a valid engine.
	ErrInvalidEngine = errors.New("not a valid engine")
	// ErrConflict: an engine name another source reports.
	ErrConflict = errors.New("the engine belongs to another source")
)

// maxEngineBody bounds POST /engines: an engine's entry is a few hundred bytes.
const maxEngineBody = 64 << 10

// Handler serves the admin routes for router on the listener at addr; prom serves /metrics
// (nil: 404).
//
// Only /healthz and /readyz are served without the guard: they are the sole routes of the
// outer mux, and everything else — the engine routes, the tree, /metrics and every
// /debug/pprof/ route — is reachable only through it: the token when one is set, else the
// loopback, Host and non-simple-request rules (guard.go).
func Handler(router Fleet, prom http.Handler, token, addr string) http.Handler {
	open := http.NewServeMux()
	open.HandleFunc("GET /healthz", func(w http.ResponseWriter, _ *http.Request) {
		w.Write([]byte("ok\n"))
	})
	open.HandleFunc("GET /readyz", func(w http.ResponseWriter, _ *http.Request) {
		if ready, reason := router.Ready(); !ready {
			http.Error(w, "not ready: "+reason, http.StatusServiceUnavailable)
			return
		}
		w.Write([]byte("ready\n"))
	})
	mux := http.NewServeMux()
	g := guard{port: portOf(addr)}
	if token != "" {
		g.want = []byte("Bearer " + token)
	}
	open.Handle("/", g.wrap(mux))
	mux.HandleFunc("GET /engines", func(w http.ResponseWriter, r *http.Request) {
		engines, err := router.Engines(askContext(r))
		if err != nil {
			http.Error(w, err.Error(), http.StatusInternalServerError)
			return
		}
		writeJSON(w, http.StatusOK, engines)
	})
	mux.HandleFunc("POST /engines", func(w http.ResponseWriter, r *http.Request) {
		body, err := io.ReadAll(http.MaxBytesReader(w, r.Body, maxEngineBody))
		if err != nil {
			http.Error(w, "reading the engine: "+err.Error(), http.StatusRequestEntityTooLarge)
			return
		}
		st, err := router.AddEngine(askContext(r), body)
		switch {
		case errors.Is(err, ErrInvalidEngine):
			http.Error(w, err.Error(), http.StatusBadRequest)
		case errors.Is(err, ErrConflict):
			http.Error(w, err.Error(), http.StatusConflict)
		case err != nil:
			http.Error(w, err.Error(), http.StatusInternalServerError)
		default:
			writeJSON(w, http.StatusCreated, st)
		}
	})
	mux.HandleFunc("DELETE /engines/{name}", func(w http.ResponseWriter, r *http.Request) {
		err := router.RemoveEngine(askContext(r), r.PathValue("name"))
		switch {
		case errors.Is(err, ErrUnknownEngine):
			http.Error(w, err.Error(), http.StatusNotFound)
		case errors.Is(err, ErrConflict):
			http.Error(w, err.Error(), http.StatusConflict)
		case err != nil:
			http.Error(w, err.Error(), http.StatusInternalServerError)
		default:
			writeJSON(w, http.StatusOK, map[string]string{"name": r.PathValue("name"), "state": "removing"})
		}
	})
	mux.HandleFunc("GET /discovery", func(w http.ResponseWriter, _ *http.Request) {
		writeJSON(w, http.StatusOK, router.Discovery())
	})
	mux.HandleFunc("POST /engines/{name}/eject", func(w http.ResponseWriter, r *http.Request) {
		state, err := router.Eject(askContext(r), r.PathValue("name"), r.URL.Query().Get("reason"))
		answerAdmin(w, r.PathValue("name"), state, err)
	})
	mux.HandleFunc("POST /engines/{name}/readmit", func(w http.ResponseWriter, r *http.Request) {
		state, err := router.Readmit(askContext(r), r.PathValue("name"), r.URL.Query().Get("force") == "true")
		answerAdmin(w, r.PathValue("name"), state, err)
	})
	mux.HandleFunc("GET /cluster", func(w http.ResponseWriter, _ *http.Request) {
		writeJSON(w, http.StatusOK, router.ClusterStatus())
	})
	mux.HandleFunc("GET /debug/tree", func(w http.ResponseWriter, r *http.Request) {
		tree, err := router.Tree(askContext(r))
		if err != nil {
			http.Error(w, err.Error(), http.StatusInternalServerError)
			return
		}
		if r.URL.Query().Get("format") == "text" {
			w.Header().Set("Content-Type", "text/plain; charset=utf-8")
			w.Write([]byte(tree.Text()))
			return
		}
		writeJSON(w, http.StatusOK, tree)
	})
	if prom != nil {
		mux.Handle("GET /metrics", prom)
	}
	mux.Handle("/debug/pprof/", profiling(pprof.Index))
	mux.HandleFunc("/debug/pprof/cmdline", pprof.Cmdline)
	mux.Handle("/debug/pprof/profile", profiling(pprof.Profile))
	mux.HandleFunc("/debug/pprof/symbol", pprof.Symbol)
	mux.Handle("/debug/pprof/trace", profiling(pprof.Trace))
	return deadlines(open)
}

func askContext(r *http.Request) context.Context {
	ctx, cancel := context.WithTimeout(r.Context(), 10*time.Second)
	context.AfterFunc(r.Context(), cancel)
	return ctx
}

func answerAdmin(w http.ResponseWriter, name, state string, err error) {
	switch {
	case errors.Is(err, ErrUnknownEngine):
		http.Error(w, err.Error(), http.StatusNotFound)
	case err != nil:
		http.Error(w, err.Error(), http.StatusConflict)
	default:
		writeJSON(w, http.StatusOK, map[string]string{"name": name, "state": state})
	}
}

func writeJSON(w http.ResponseWriter, status int, v any) {
	b, err := json.MarshalIndent(v, "", "  ")
	if err != nil {
		http.Error(w, err.Error(), http.StatusInternalServerError)
		return
	}
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	w.Write(append(b, '\n'))
}

// BearerHeader returns the Authorization value for token, for clients such as `narwhal dump`.
func BearerHeader(token string) string { return "Bearer " + strings.TrimSpace(token) }
