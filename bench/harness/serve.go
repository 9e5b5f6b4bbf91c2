package harness

import (
	"fmt"
	"net"
	"net/http"
	"os"
	"strconv"
	"time"

	json "github.com/goccy/go-json"
	"go.yaml.in/yaml/v3"

	"github.com/narwhal-router/narwhal/cluster"
	"github.com/narwhal-router/narwhal/config"
)

// StartServe starts `narwhal serve` with cfg as it is — the whole configuration, built in Go
// by the scenario (cluster, KV events, any engine list) rather than from RouterConfig's
// template — its client and admin listeners on free loopback ports. The file is
// <name>.yaml, checked with the router's own parser first; the log <name>.log. It returns
// once the router is ready with every engine joined, within the deadline, and how long that
// took from the process's start.
func StartServe(env Env, name string, cfg config.Config, within time.Duration) (*Router, time.Duration, error) {
	var err error
	if cfg.Server.Listen, err = freePort(); err != nil {
		return nil, 0, err
	}
	if cfg.Server.AdminListen, err = freePort(); err != nil {
		return nil, 0, err
	}
	y, err := yaml.Marshal(cfg)
	if err != nil {
		return nil, 0, err
	}
	if _, err := config.Parse(y, func(string) (string, bool) { return "", false }); err != nil {
		return nil, 0, fmt.Errorf("%s: generated configuration is invalid: %w", name, err)
	}
	path := env.Path(name + ".yaml")
	if err := os.WriteFile(path, y, 0o644); err != nil {
		return nil, 0, err
	}
	start := time.Now()
	p, err := Start(Spec{Name: name, Path: env.Narwhal, Args: []string{"serve", "--config", path},
		Log: env.Path(name + ".log"), Env: env.RouterEnv})
	if err != nil {
		return nil, 0, err
	}
	r := &Router{Proc: p, Addr: cfg.Server.Listen, Admin: cfg.Server.AdminListen, Config: cfg,
		client: &http.Client{Timeout: 2 * time.Minute}}
	// With a thousand engines /engines is a large answer: poll it gently, so that the
	// readiness check does not itself slow the start it times.
	if err := r.waitReady(name, env.Narwhal, within, max(20*time.Millisecond, within/300)); err != nil {
		return nil, 0, err
	}
	return r, time.Since(start), nil
}

// OpenFiles counts pid's open file descriptors (/proc/<pid>/fd).
func OpenFiles(pid int) (int, error) {
	ents, err := os.ReadDir("/proc/" + strconv.Itoa(pid) + "/fd")
	return len(ents), err
}

// Gauge reads one unlabelled Prometheus value from the router's /metrics (the Go runtime's
// go_memstats_heap_inuse_bytes, say).
func (r *Router) Gauge(name string) (float64, error) {
	v, err := r.Counter(name, "")
	if err != nil {
		return 0, err
	}
	got, ok := v[""]
	if !ok {
		return 0, fmt.Errorf("no %s in /metrics", name)
	}
	return got, nil
}

// FreeClusterAddr is a loopback host:port free for both TCP and UDP at the moment: a cluster
// node's bind address (protoactor's remote on TCP, the static provider's heartbeats on UDP).
func FreeClusterAddr() (string, error) {
	for range 100 {
		addr, err := freePort()
		if err != nil {
			return "", err
		}
		u, err := net.ListenPacket("udp", addr)
		if err != nil {
			continue
		}
		u.Close()
		return addr, nil
	}
	return "", fmt.Errorf("no loopback port free for both TCP and UDP")
}

// Members is how many nodes the router's /cluster lists.
func (r *Router) Members() (int, error) {
	b, err := r.Get("/cluster")
	if err != nil {
		return 0, err
	}
	var st cluster.Status
	if err := json.Unmarshal(b, &st); err != nil {
		return 0, err
	}
	return len(st.Members), nil
}
