package main

import (
	"bufio"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/narwhal-router/narwhal/bench/sim"
	"github.com/narwhal-router/narwhal/internal/testwait"
)

// The life of a `narwhal serve` process as an operator and a load balancer see it: a start that
// does not wait for dead engines, a reload of the real file on SIGHUP, a drain on SIGTERM.

// serveProc is a running `narwhal serve`.
type serveProc struct {
	t           *testing.T
	cmd         *exec.Cmd
	path        string
	addr, admin string
	log         *lockedBuffer
	exited      chan struct{}
	client      *http.Client
}

type lockedBuffer struct {
	mu sync.Mutex
	b  strings.Builder
}

func (l *lockedBuffer) add(s string) { l.mu.Lock(); l.b.WriteString(s + "\n"); l.mu.Unlock() }

func (l *lockedBuffer) String() string { l.mu.Lock(); defer l.mu.Unlock(); return l.b.String() }

var listeningLine = regexp.MustCompile(`msg="narwhal listening" addr=(\S+) admin=(\S+)`)

// startServe runs `narwhal serve --config path` and waits until it says it listens.
func startServe(t *testing.T, path string) *serveProc {
	t.Helper()
	return startServeUnder(t, path)
}

// startServeUnder is startServe with the command run under wrapper (e.g. prlimit and its flags).
func startServeUnder(t *testing.T, path string, wrapper ...string) *serveProc {
	t.Helper()
	if testing.Short() {
		t.Skip("starts a process")
	}
	p := &serveProc{t: t, path: path, log: &lockedBuffer{}, exited: make(chan struct{}),
		client: &http.Client{Timeout: 10 * time.Second, Transport: &http.Transport{DisableKeepAlives: true}}}
	args := append(append([]string(nil), wrapper...), os.Args[0], "serve", "--config", path)
	p.cmd = exec.Command(args[0], args[1:]...)
	p.cmd.Env = append(os.Environ(), "NARWHAL_TEST_MAIN=1")
	stderr, err := p.cmd.StderrPipe()
	if err != nil {
		t.Fatal(err)
	}
	p.cmd.Stdout = io.Discard
	if err := p.cmd.Start(); err != nil {
		t.Fatal(err)
	}
	listening := make(chan []string, 1)
	go func() {
		defer close(p.exited)
		sc := bufio.NewScanner(stderr)
		for sc.Scan() {
			p.log.add(sc.Text())
			if m := listeningLine.FindStringSubmatch(sc.Text()); m != nil {
				listening <- m
			}
		}
		p.cmd.Wait()
	}()
	t.Cleanup(func() {
		p.cmd.Process.Kill()
		<-p.exited
		if t.Failed() {
			t.Logf("narwhal serve log:\n%s", p.log)
		}
	})
	select {
	case m := <-listening:
		p.addr, p.admin = m[1], m[2]
	case <-p.exited:
		t.Fatalf("narwhal serve exited before listening:\n%s", p.log)
	case <-time.After(20 * time.Second):
		t.Fatalf("narwhal serve did not listen within 20 s:\n%s", p.log)
	}
	return p
}

// get fetches an admin path: its status and body (status 0: no answer).
func (p *serveProc) get(path string) (int, string) {
	resp, err := p.client.Get("http://" + p.admin + path)
	if err != nil {
		return 0, err.Error()
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(b)
}

// engines is the process's /engines, by name.
func (p *serveProc) engines() map[string]map[string]any {
	p.t.Helper()
	code, body := p.get("/engines")
	if code != 200 {
		p.t.Fatalf("/engines: %d %s", code, body)
	}
	var es []map[string]any
	if err := json.Unmarshal([]byte(body), &es); err != nil {
		p.t.Fatal(err)
	}
	out := map[string]map[string]any{}
	for _, e := range es {
		out[e["name"].(string)] = e
	}
	return out
}

// stream sends one streaming completion and returns what failed, or nil.
func (p *serveProc) stream(client *http.Client) error {
	resp, err := client.Post("http://"+p.addr+"/v1/completions", "application/json",
		strings.NewReader(`{"model":"m","prompt":"hello there","stream":true}`))
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil || resp.StatusCode != 200 || !strings.HasSuffix(string(b), "data: [DONE]\n\n") {
		return fmt.Errorf("status %d, %v: %q", resp.StatusCode, err, b)
	}
	return nil
}

// waitFor checks cond every 10 ms for up to within.
func waitFor(t *testing.T, within time.Duration, cond func() bool, what func() string) {
	t.Helper()
	testwait.UntilEvery(t, within, 10*time.Millisecond, cond, what)
}

// freeAddr is a loopback address nothing listens on.
func freeAddr(t *testing.T) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	return ln.Addr().String()
}

// A start that survives a dead engine: serve listens at once (no preflight to fail, no wait
// for the dead engine's model list), /healthz is live at once, /readyz says ready once the live
// engines joined while the dead one is ejected and probed, and requests are served. When the
// engine comes up its probe admits it, its model list learnt. The strict start
// (preflight.require: all) still refuses the same file.
func TestServeStartsWithADeadEngine(t *testing.T) {
	fleet, err := sim.StartFleet(sim.FleetOptions{Prefill: 1, Decode: 1, Engine: sim.Options{Models: []string{"m"}, Tokens: 2}})
	if err != nil {
		t.Fatal(err)
	}
	defer fleet.Close()
	dead := freeAddr(t)
	server := `listen: "127.0.0.1:0", admin_listen: "127.0.0.1:0", shutdown_grace_s: 1, drain_delay_s: 0`
	path := writeFleetConfig(t, fleet, server, "recovery: {probe_interval_s: 0.2, probe_max_interval_s: 0.4}",
		"engine: {models_timeout_s: 1}")
	b, _ := os.ReadFile(path)
	// dx serves no configured model: the router must ask it, and it does not answer.
	os.WriteFile(path, append(b, fmt.Sprintf("  - {name: dx, url: \"http://%s\", role: decode}\n", dead)...), 0o644)

	began := time.Now()
	p := startServe(t, path)
	if took := time.Since(began); took > 5*time.Second {
		t.Fatalf("listening took %v with a dead engine", took)
	}
	if code, _ := p.get("/healthz"); code != 200 {
		t.Fatalf("/healthz right after listening: %d", code)
	}
	waitFor(t, 5*time.Second, func() bool { code, _ := p.get("/readyz"); return code == 200 }, func() string {
		_, body := p.get("/readyz")
		return "not ready: " + body
	})
	dx := p.engines()["dx"]
	if dx["state"] != "ejected" || dx["ejected_by"] != "breaker" || !strings.Contains(fmt.Sprint(dx["eject_reason"]), "join check failed: model list") {
		t.Fatalf("the dead engine: %v", dx)
	}
	client := &http.Client{Timeout: 10 * time.Second}
	for range 5 {
		if err := p.stream(client); err != nil {
			t.Fatalf("a request beside the dead engine: %v", err)
		}
	}

	// It comes up: a probe admits it, with the models it lists.
	up, err := sim.Start(sim.Options{Name: "dx", Role: sim.RoleDecode, Listen: dead, Models: []string{"m"}, Tokens: 2})
	if err != nil {
		t.Skipf("cannot listen on %s again: %v", dead, err)
	}
	defer up.Close()
	waitFor(t, 5*time.Second, func() bool { return p.engines()["dx"]["state"] == "admitted" }, func() string {
		return fmt.Sprintf("dx not readmitted: %v", p.engines()["dx"])
	})
	if models := fmt.Sprint(p.engines()["dx"]["models"]); models != "[m]" {
		t.Fatalf("dx's models after it came up: %s", models)
	}
	up.Close()

	// The strict start refuses it, as before.
	strict := filepath.Join(t.TempDir(), "strict.yaml")
	os.WriteFile(strict, append(append(b, fmt.Sprintf("  - {name: dx, url: \"http://%s\", role: decode}\n", freeAddr(t))...),
		"preflight: {require: all}\n"...), 0o644)
	cmd := exec.Command(os.Args[0], "serve", "--config", strict)
	cmd.Env = append(os.Environ(), "NARWHAL_TEST_MAIN=1")
	out, err := cmd.CombinedOutput()
	if ee, ok := err.(*exec.ExitError); !ok || ee.ExitCode() != 1 || !strings.Contains(string(out), "preflight failed (preflight.require: all") {
		t.Fatalf("the strict start with a dead engine: %v\n%s", err, out)
	}
}

// SIGTERM as a load balancer sees it: /readyz turns 503 (draining) at once, yet for
// drain_delay_s a new connection is still accepted and served; then the listener closes and
// the process exits 0.
func TestServeDrainsOnSIGTERM(t *testing.T) {
	fleet, err := sim.StartFleet(sim.FleetOptions{Prefill: 1, Decode: 1, Engine: sim.Options{Models: []string{"m"}, Tokens: 2}})
	if err != nil {
		t.Fatal(err)
	}
	defer fleet.Close()
	const delay = 1.5
	path := writeFleetConfig(t, fleet, fmt.Sprintf(`listen: "127.0.0.1:0", admin_listen: "127.0.0.1:0", shutdown_grace_s: 1, drain_delay_s: %v`, delay))
	p := startServe(t, path)
	waitFor(t, 5*time.Second, func() bool { code, _ := p.get("/readyz"); return code == 200 }, func() string { return "never ready" })
	client := &http.Client{Timeout: 5 * time.Second, Transport: &http.Transport{DisableKeepAlives: true}} // a new connection each time

	sent := time.Now()
	p.cmd.Process.Signal(syscall.SIGTERM)
	waitFor(t, time.Second, func() bool { code, _ := p.get("/readyz"); return code == 503 }, func() string {
		code, body := p.get("/readyz")
		return fmt.Sprintf("/readyz %d %s after SIGTERM, want 503", code, body)
	})
	if _, body := p.get("/readyz"); !strings.Contains(body, "draining") {
		t.Fatalf("/readyz while draining says %q", body)
	}
	served := 0
	for time.Since(sent) < time.Duration(delay*float64(time.Second))*2/3 {
		if err := p.stream(client); err != nil {
			t.Fatalf("a new connection %v after SIGTERM, within drain_delay_s %v: %v", time.Since(sent), delay, err)
		}
		served++
	}
	waitFor(t, time.Duration(delay*float64(time.Second))+3*time.Second, func() bool {
		c, err := net.DialTimeout("tcp", p.addr, time.Second)
		if err == nil {
			c.Close()
		}
		return err != nil
	}, func() string { return "the listener still accepts long after drain_delay_s" })
	if closed := time.Since(sent); closed < time.Duration(delay*float64(time.Second)) {
		t.Fatalf("the listener closed %v after SIGTERM, before drain_delay_s %v", closed, delay)
	}
	select {
	case <-p.exited:
	case <-time.After(10 * time.Second):
		t.Fatal("narwhal serve did not exit after its drain and grace")
	}
	if code := p.cmd.ProcessState.ExitCode(); code != 0 {
		t.Fatalf("exit code %d after SIGTERM:\n%s", code, p.log)
	}
	t.Logf("served %d new connections during the drain", served)
}

// SIGHUP re-reads the real file: an engine added and another removed apply without a client
// seeing a failure, as do the run-time settings; a file that changes a listener is refused by
// name and changes nothing (not even its engine list); a file that does not parse changes
// nothing either. /discovery and the metrics say what the last reload did.
func TestServeReloadsOnSIGHUP(t *testing.T) {
	fleet, err := sim.StartFleet(sim.FleetOptions{Prefill: 1, Decode: 2, Engine: sim.Options{Models: []string{"m"}, Tokens: 4, ITL: 2 * time.Millisecond}})
	if err != nil {
		t.Fatal(err)
	}
	defer fleet.Close()
	dir := t.TempDir()
	server := `listen: "127.0.0.1:0", admin_listen: "127.0.0.1:0", shutdown_grace_s: 1, drain_delay_s: 0`
	write := func(server string, engines []string, extra ...string) string {
		var b strings.Builder
		fmt.Fprintf(&b, "server: {%s}\n", server)
		logged := false
		for _, l := range extra {
			b.WriteString(l + "\n")
			logged = logged || strings.HasPrefix(l, "log:")
		}
		if !logged {
			b.WriteString("log: {format: text}\n")
		}
		b.WriteString("engines:\n" + engineLines(fleet, engines...))
		path := filepath.Join(dir, "narwhal.yaml")
		tmp := path + ".new"
		if err := os.WriteFile(tmp, []byte(b.String()), 0o644); err != nil {
			t.Fatal(err)
		}
		if err := os.Rename(tmp, path); err != nil { // as editors and config managers replace a file
			t.Fatal(err)
		}
		return path
	}
	path := write(server, []string{"p0", "d0"})
	p := startServe(t, path)
	waitFor(t, 5*time.Second, func() bool { code, _ := p.get("/readyz"); return code == 200 }, func() string { return "never ready" })

	var ok atomic.Int64
	var mu sync.Mutex
	var failures []string
	stop := make(chan struct{})
	var wg sync.WaitGroup
	for range 4 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			client := &http.Client{Timeout: 10 * time.Second}
			for {
				select {
				case <-stop:
					return
				default:
				}
				if err := p.stream(client); err != nil {
					mu.Lock()
					failures = append(failures, err.Error())
					mu.Unlock()
				} else {
					ok.Add(1)
				}
			}
		}()
	}
	hup := func() { p.t.Helper(); p.cmd.Process.Signal(syscall.SIGHUP) }
	reloads := &reloadWatch{p: p}
	waitReloads := func(n int, result string) map[string]any {
		t.Helper()
		return reloads.next(t, 5*time.Second, fmt.Sprintf("reload %d", n), result)
	}

	// 1: add d1, quieten the log to warnings, allow a retry.
	write(server, []string{"p0", "d0", "d1"}, "log: {level: warn, format: text}", "recovery: {max_attempts: 2}")
	hup()
	st := waitReloads(1, "applied")
	// The log from the reload on: its own announcement (at info, before the level changed) is
	// the last info line there may be.
	const announced = `msg="reloading the configuration"`
	waitFor(t, 3*time.Second, func() bool { return strings.Contains(p.log.String(), announced) }, func() string { return "no reload announced" })
	quiet := strings.Index(p.log.String(), announced) + len(announced)
	if changed := fmt.Sprint(st["changed"]); !strings.Contains(changed, "engines") || !strings.Contains(changed, "log.level") ||
		!strings.Contains(changed, "recovery.max_attempts") {
		t.Fatalf("reload 1 changed %s", changed)
	}
	waitFor(t, 5*time.Second, func() bool { return p.engines()["d1"]["state"] == "admitted" }, func() string {
		return fmt.Sprintf("d1 not admitted: %v", p.engines()["d1"])
	})
	// 2: d0 leaves (its streams finish); only d1 and p0 take requests from then on.
	write(server, []string{"p0", "d1"}, "log: {level: warn, format: text}", "recovery: {max_attempts: 2}")
	hup()
	waitReloads(2, "applied")
	waitFor(t, 5*time.Second, func() bool { _, in := p.engines()["d0"]; return !in }, func() string { return "d0 never left" })
	d0 := fleet.Engine("d0").Stats().DecodeRequests
	served := ok.Load()
	waitFor(t, 10*time.Second, func() bool { return ok.Load() > served+40 }, func() string { return "the load stalled" })
	if n := fleet.Engine("d0").Stats().DecodeRequests - d0; n != 0 {
		t.Fatalf("%d decode legs reached d0 after it left the file", n)
	}

	// 3: a listener changed (and d0 back): refused by name, nothing applied.
	write(`listen: "127.0.0.1:1", admin_listen: "127.0.0.1:0", shutdown_grace_s: 1, drain_delay_s: 0`, []string{"p0", "d0", "d1"}, // testports: not bound (a listener change the reload refuses)
		"log: {level: warn, format: text}", "recovery: {max_attempts: 2}")
	hup()
	st = waitReloads(3, "refused")
	if fmt.Sprint(st["refused"]) != "[server.listen]" || !strings.Contains(fmt.Sprint(st["error"]), "server.listen cannot change while Narwhal runs") {
		t.Fatalf("refused reload: %v", st)
	}
	if !regexp.MustCompile(`level=ERROR msg="configuration reload refused: it changes settings that cannot change at run time; the running configuration is unchanged" refused=\[server.listen\]`).MatchString(p.log.String()) {
		t.Fatalf("no refusal naming server.listen in the log:\n%s", p.log)
	}
	if _, in := p.engines()["d0"]; in {
		t.Fatal("a refused reload applied its engine list")
	}
	// 4: a file that does not parse.
	os.WriteFile(path, []byte("server: {listen: [\n"), 0o644)
	hup()
	st = waitReloads(4, "invalid")
	if !strings.Contains(fmt.Sprint(st["error"]), "not valid YAML") {
		t.Fatalf("invalid reload: %v", st)
	}
	_, metrics := p.get("/metrics")
	for _, want := range []string{`narwhal_config_reloads_total{result="applied"} 2`, `narwhal_config_reloads_total{result="refused"} 1`,
		`narwhal_config_reloads_total{result="invalid"} 1`, "narwhal_config_reload_ok 0"} {
		waitFor(t, 3*time.Second, func() bool { _, metrics = p.get("/metrics"); return strings.Contains(metrics, want) }, func() string {
			return "no " + want + " in /metrics"
		})
	}
	close(stop)
	wg.Wait()
	if len(failures) > 0 {
		t.Fatalf("%d of %d requests failed across the reloads: %v", len(failures), ok.Load()+int64(len(failures)), failures[:min(5, len(failures))])
	}
	if after := p.log.String()[quiet:]; strings.Contains(after, "level=INFO") {
		t.Errorf("log.level: warn did not apply: info lines after the reload:\n%s", grepLines(after, "level=INFO"))
	}

	// 5: client keys apply to the requests after the reload.
	write(server+`, api_keys: ["k1"]`, []string{"p0", "d1"})
	hup()
	waitReloads(5, "applied")
	if err := p.stream(&http.Client{Timeout: 5 * time.Second}); err == nil || !strings.Contains(err.Error(), "status 401") {
		t.Fatalf("a request without the key after api_keys was reloaded: %v", err)
	}
	if code, _ := p.get("/readyz"); code != 200 {
		t.Fatalf("/readyz after the reloads: %d", code)
	}
	t.Logf("%d requests across 5 reloads, 0 failed", ok.Load())
}

func grepLines(s, sub string) string {
	var out []string
	for _, l := range strings.Split(s, "\n") {
		if strings.Contains(l, sub) {
			out = append(out, l)
		}
	}
	return strings.Join(out, "\n")
}
