package harness

import (
	"bufio"
	"bytes"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"strconv"
	"strings"
	"time"

	"github.com/narwhal-router/narwhal/config"
)

// Router is a running `narwhal serve`.
type Router struct {
	Proc   *Proc
	Addr   string // API host:port
	Admin  string // admin host:port
	Config config.Config
	client *http.Client
}

// StartRouter writes the configuration (on free loopback ports) and starts the router, and
// returns once its admin listener says it is ready.
func StartRouter(env Env, c RouterConfig) (*Router, error) {
	return StartRouterAs(env, "router", env.Narwhal, c)
}

// StartRouterAs is StartRouter for the router binary bin, whose process, configuration
// (<name>.yaml) and log (<name>.log) are called name: a second router on the same fleet, its
// own ports, so two builds can be measured side by side.
func StartRouterAs(env Env, name, bin string, c RouterConfig) (*Router, error) {
	var err error
	if c.Listen, err = freePort(); err != nil {
		return nil, err
	}
	if c.AdminListen, err = freePort(); err != nil {
		return nil, err
	}
	path := env.Path(name + ".yaml")
	cfg, err := c.Write(path)
	if err != nil {
		return nil, err
	}
	p, err := Start(Spec{Name: name, Path: bin, Args: []string{"serve", "--config", path},
		Log: env.Path(name + ".log"), Env: env.RouterEnv})
	if err != nil {
		return nil, err
	}
	r := &Router{Proc: p, Addr: c.Listen, Admin: c.AdminListen, Config: cfg,
		client: &http.Client{Timeout: 2 * time.Minute}}
	if err := r.waitReady(name, bin, 20*time.Second, 20*time.Millisecond); err != nil {
		return nil, err
	}
	return r, nil
}

// waitReady polls every poll until the router says it is ready and no engine is still
// joining; past within (or if the process dies) it stops the router and says why.
func (r *Router) waitReady(name, bin string, within, poll time.Duration) error {
	deadline := time.Now().Add(within)
	for {
		if err := r.Proc.Died(); err != nil {
			return err
		}
		if b, err := r.Get("/readyz"); err == nil && strings.HasPrefix(string(b), "ready") && !r.joining() {
			return nil
		}
		if time.Now().After(deadline) {
			r.Proc.Stop(time.Second)
			return fmt.Errorf("%s (%s) not ready within %v; log:\n%s", name, bin, within, indent(r.Proc.Tail(15)))
		}
		time.Sleep(poll)
	}
}

// joining reports whether an engine is still joining (its check not passed yet): a window
// measured before every engine joined would not measure the configured fleet.
func (r *Router) joining() bool {
	b, err := r.Get("/engines")
	return err != nil || strings.Contains(string(b), `"state": "joining"`)
}

// Do sends an admin request with body (may be empty) and returns the status and body.
func (r *Router) Do(method, path, body string) (int, []byte, error) {
	req, err := http.NewRequest(method, "http://"+r.Admin+path, strings.NewReader(body))
	if err != nil {
		return 0, nil, err
	}
	resp, err := r.client.Do(req)
	if err != nil {
		return 0, nil, err
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	return resp.StatusCode, b, err
}

// Get fetches an admin path.
func (r *Router) Get(path string) ([]byte, error) {
	resp, err := r.client.Get("http://" + r.Admin + path)
	if err != nil {
		return nil, err
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		return nil, err
	}
	if resp.StatusCode != http.StatusOK {
		return b, fmt.Errorf("GET %s: %s", path, resp.Status)
	}
	return b, nil
}

// Save fetches an admin path into a file (profiles).
func (r *Router) Save(path, file string) error {
	b, err := r.Get(path)
	if err != nil {
		return err
	}
	return os.WriteFile(file, b, 0o644)
}

// Counter sums a Prometheus metric from /metrics over the series whose labels contain every
// `key="value"` in match, grouped by the value of label by ("" sums everything).
func (r *Router) Counter(name, by string, match ...string) (map[string]float64, error) {
	b, err := r.Get("/metrics")
	if err != nil {
		return nil, err
	}
	out := map[string]float64{}
	sc := bufio.NewScanner(bytes.NewReader(b))
	sc.Buffer(make([]byte, 64<<10), 4<<20)
	for sc.Scan() {
		line := sc.Text()
		if !strings.HasPrefix(line, name) {
			continue
		}
		rest := line[len(name):]
		labels := ""
		if strings.HasPrefix(rest, "{") {
			end := strings.Index(rest, "}")
			if end < 0 {
				continue
			}
			labels, rest = rest[1:end], rest[end+1:]
		} else if !strings.HasPrefix(rest, " ") {
			continue // another metric sharing the prefix
		}
		if !containsAll(labels, match) {
			continue
		}
		v, err := strconv.ParseFloat(strings.TrimSpace(rest), 64)
		if err != nil {
			continue
		}
		out[labelValue(labels, by)] += v
	}
	return out, nil
}

func containsAll(labels string, match []string) bool {
	for _, m := range match {
		if !strings.Contains(labels, m) {
			return false
		}
	}
	return true
}

func labelValue(labels, key string) string {
	if key == "" {
		return ""
	}
	for _, kv := range strings.Split(labels, ",") {
		if k, v, ok := strings.Cut(kv, "="); ok && k == key {
			return strings.Trim(v, `"`)
		}
	}
	return ""
}

// freePort returns a loopback address nobody listens on at the moment.
func freePort() (string, error) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return "", err
	}
	defer ln.Close()
	return ln.Addr().String(), nil
}
